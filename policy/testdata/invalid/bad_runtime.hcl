# want: bad_runtime.hcl:4: daemon.runtime: unknown value "docker": choose one of runsc, runc, containerd
# want: bad_runtime.hcl:6: runtime "docker": unknown runtime
daemon {
  runtime = "docker"
}
runtime "docker" {}
