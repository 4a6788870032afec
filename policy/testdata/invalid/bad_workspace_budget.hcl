# want: bad_workspace_budget.hcl:5: daemon.workspace_quota_per_uid: invalid size "4GB of it"
# want: bad_workspace_budget.hcl:6: daemon.workspace_quota_total: must be greater than 0 bytes
daemon {
  workspace_quota         = "1GiB"
  workspace_quota_per_uid = "4GB of it"
  workspace_quota_total   = 0
}
