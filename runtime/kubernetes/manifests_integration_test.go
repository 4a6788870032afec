//go:build integration

package kubernetes

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestManifests applies the Kustomize base of examples/kubernetes to the
// test cluster (rendered by kubectl's own kustomize, applied server-side),
// checks that its objects exist, and that the daemon's service account may
// do what the backend does in its namespace and nothing outside it.
func TestManifests(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	kubectl := c.env["KUBECTL"]
	if kubectl == "" {
		t.Fatalf("hack/kube.sh env printed no KUBECTL=: %v", c.env)
	}
	base, err := filepath.Abs(filepath.Join("..", "..", "examples", "kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(stdin []byte, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return out.String()
	}
	rendered := run(nil, "kustomize", base)
	applied := run([]byte(rendered), "apply", "--server-side", "--field-manager=skillbox-test", "-f", "-")
	t.Logf("applied:\n%s", applied)
	// Undo all but the RuntimeClass, which hack/kube.sh made and other
	// tests use: the namespace takes its objects with it. The tests after
	// this one make the namespace again, without the base's objects (its
	// NetworkPolicy denies run pods all traffic): its deletion is waited
	// for.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for _, err := range []error{
			c.cs.CoreV1().Namespaces().Delete(ctx, "skillbox", metav1.DeleteOptions{}),
			c.cs.RbacV1().ClusterRoleBindings().Delete(ctx, "skillbox-runtimeclass", metav1.DeleteOptions{}),
			c.cs.RbacV1().ClusterRoles().Delete(ctx, "skillbox-runtimeclass", metav1.DeleteOptions{}),
		} {
			if err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
		start := time.Now()
		for {
			_, err := c.cs.CoreV1().Namespaces().Get(ctx, "skillbox", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				t.Logf("namespace skillbox deleted in %s", time.Since(start).Round(10*time.Millisecond))
				return
			}
			select {
			case <-ctx.Done():
				t.Errorf("namespace skillbox is still there %s after its deletion (%v): later tests cannot make it afresh", time.Since(start).Round(time.Second), err)
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	})

	const ns, sa = "skillbox", "skillbox-daemon"
	for _, check := range []struct {
		what string
		get  func() error
	}{
		{"namespace", func() error { _, err := c.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); return err }},
		{"service account", func() error {
			_, err := c.cs.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{})
			return err
		}},
		{"role", func() error { _, err := c.cs.RbacV1().Roles(ns).Get(ctx, sa, metav1.GetOptions{}); return err }},
		{"role binding", func() error { _, err := c.cs.RbacV1().RoleBindings(ns).Get(ctx, sa, metav1.GetOptions{}); return err }},
		{"network policy", func() error {
			_, err := c.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, "skillbox-runs-deny-all", metav1.GetOptions{})
			return err
		}},
		{"config map", func() error {
			_, err := c.cs.CoreV1().ConfigMaps(ns).Get(ctx, "skillbox-config", metav1.GetOptions{})
			return err
		}},
		{"deployment", func() error {
			_, err := c.cs.AppsV1().Deployments(ns).Get(ctx, "skillbox", metav1.GetOptions{})
			return err
		}},
	} {
		if err := check.get(); err != nil {
			t.Errorf("%s: %v", check.what, err)
		}
	}
	rc, err := c.cs.NodeV1().RuntimeClasses().Get(ctx, RuntimeClass, metav1.GetOptions{})
	if err != nil || rc.Handler != "gvisor" {
		t.Errorf("RuntimeClass %s: handler %v, %v", RuntimeClass, rc, err)
	}
	np, err := c.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, "skillbox-runs-deny-all", metav1.GetOptions{})
	if err == nil && (np.Spec.PodSelector.MatchLabels[LabelManagedBy] != ManagedBy || len(np.Spec.Ingress) > 0 || len(np.Spec.Egress) > 0 || len(np.Spec.PolicyTypes) != 2) {
		t.Errorf("network policy does not deny all of the run pods: %+v", np.Spec)
	}
	d, err := c.cs.AppsV1().Deployments(ns).Get(ctx, "skillbox", metav1.GetOptions{})
	if err == nil {
		p := d.Spec.Template.Spec
		sc := p.Containers[0].SecurityContext
		if p.ServiceAccountName != sa || p.SecurityContext == nil || p.SecurityContext.RunAsNonRoot == nil || !*p.SecurityContext.RunAsNonRoot ||
			sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("daemon pod is not hardened: %+v %+v", p.SecurityContext, sc)
		}
		if l := d.Spec.Template.Labels[LabelManagedBy]; l == ManagedBy {
			t.Errorf("the daemon's pods carry %s=%s: the run pods' network policy and sweep would take them for runs", LabelManagedBy, l)
		}
	}

	// What the service account may do, as the API server's authorizer
	// says (SubjectAccessReview).
	user := "system:serviceaccount:" + ns + ":" + sa
	for _, tc := range []struct {
		namespace, verb, group, resource, sub, name string
		allowed                                     bool
	}{
		{ns, "create", "", "pods", "", "", true},
		{ns, "get", "", "pods", "", "", true},
		{ns, "list", "", "pods", "", "", true},
		{ns, "patch", "", "pods", "", "", true},
		{ns, "delete", "", "pods", "", "", true},
		{ns, "create", "", "pods", "exec", "", true},
		{ns, "list", "", "events", "", "", true},
		{ns, "get", "", "namespaces", "", ns, true},
		{"", "get", "node.k8s.io", "runtimeclasses", "", RuntimeClass, true},
		// Nothing outside its namespace, nothing it does not use.
		{"default", "list", "", "pods", "", "", false},
		{"default", "create", "", "pods", "", "", false},
		{"default", "create", "", "pods", "exec", "", false},
		{"kube-system", "get", "", "secrets", "", "", false},
		{"", "list", "", "pods", "", "", false}, // all namespaces
		{ns, "update", "", "pods", "", "", false},
		{ns, "create", "", "pods", "attach", "", false},
		{ns, "get", "", "secrets", "", "", false},
		{ns, "list", "", "secrets", "", "", false},
		{ns, "get", "", "secrets", "", caSecret, true}, // the agents' CA
		{ns, "create", "", "secrets", "", "", true},    // a pod's agent certificate
		{ns, "watch", "", "pods", "", "", true},
		{ns, "create", "", "serviceaccounts", "token", "", false},
		{ns, "create", "rbac.authorization.k8s.io", "roles", "", "", false},
		{ns, "create", "networking.k8s.io", "networkpolicies", "", "", true}, // a run's egress policy
		{ns, "get", "networking.k8s.io", "networkpolicies", "", "", true},
		{ns, "delete", "networking.k8s.io", "networkpolicies", "", "", true},
		{ns, "update", "networking.k8s.io", "networkpolicies", "", "", false},
		{"default", "create", "networking.k8s.io", "networkpolicies", "", "", false},
		{"", "get", "node.k8s.io", "runtimeclasses", "", "runc", false},
		{"", "get", "", "namespaces", "", "default", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: tc.namespace, Verb: tc.verb, Group: tc.group, Resource: tc.resource, Subresource: tc.sub, Name: tc.name,
			},
		}}
		got, err := c.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.allowed {
			t.Errorf("%s %s %s/%s %q in namespace %q: allowed %v, want %v (%s)", sa, tc.verb, tc.resource, tc.sub, tc.name, tc.namespace,
				got.Status.Allowed, tc.allowed, got.Status.Reason)
		}
	}
}
