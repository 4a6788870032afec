# A daemon whose runs are pods on a Kubernetes cluster (issue 27).
daemon {
  runtime   = "kubernetes"
  state_dir = "/var/lib/skillbox/state"
}

runtime "kubernetes" {
  kubeconfig = "kube/config"
  namespace  = "skillbox-runs"
  state_dir  = "/var/lib/skillbox/kubernetes"
}
