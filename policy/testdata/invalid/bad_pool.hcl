# want: bad_pool.hcl:5: pool.total: is smaller than per_key (4): raise it or lower per_key
# want: bad_pool.hcl:6: pool.idle_timeout: must be a duration string
pool {
  per_key       = 4
  total         = 2
  idle_timeout  = 10
  memory_budget = "128MiB"
}
