# want: bad_kubernetes_namespace.hcl:5
# want: invalid namespace "Agents_1"
# want: a Kubernetes namespace is lowercase letters
runtime "kubernetes" {
  namespace = "Agents_1"
}
