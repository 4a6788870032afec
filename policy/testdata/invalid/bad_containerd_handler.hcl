# want: bad_containerd_handler.hcl:4: runtime "containerd".handler: unknown value "io.containerd.kata.v2"
runtime "containerd" {
  address = "/run/containerd/containerd.sock"
  handler = "io.containerd.kata.v2"
}
