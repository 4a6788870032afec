# want: platform_on_runc.hcl:3: runtime "runc".platform: not used by runtime "runc"
runtime "runc" {
  platform = "ptrace"
}
