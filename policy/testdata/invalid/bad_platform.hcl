# want: bad_platform.hcl:3: runtime "runsc".platform: unknown value "xen"
runtime "runsc" {
  platform = "xen"
}
