# want: bad_kubernetes_attr.hcl:5
# want: not used by runtime "kubernetes" (only by containerd)
# want: kubeconfig
runtime "kubernetes" {
  address = "/run/containerd/containerd.sock"
}
runtime "containerd" {
  kubeconfig = "/etc/kube/config"
}
