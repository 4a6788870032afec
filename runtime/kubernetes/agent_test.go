package kubernetes

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/skillbox/skillbox/runtime"
)

// TestAgentPod: the agent's pod runs the agent as root with the four
// capabilities it needs and nothing else, its certificate mounted for it
// alone, and the job it starts confined to another uid and a network of
// its own.
func TestAgentPod(t *testing.T) {
	pod, err := podSpec(testJob(), "ns1", "")
	if err != nil {
		t.Fatal(err)
	}
	agentPod(pod, "skillbox.local/python@sha256:"+strings.Repeat("a", 64), 1, maxSkillBytes)
	c := pod.Spec.Containers[0]
	if c.Command[0] != AgentPath || c.Command[1] != "supervise" {
		t.Fatalf("command %q, want %s supervise", c.Command, AgentPath)
	}
	args := strings.Join(c.Command, " ")
	for _, want := range []string{"--listen :7443", "--job-uid 65534", "--job-gid 65534", "--job-netns", "--client-ca " + agentTLSDir + "/ca.crt", "--idle-timeout"} {
		if !strings.Contains(args, want) {
			t.Errorf("command %q lacks %q", args, want)
		}
	}
	sc := c.SecurityContext
	if *sc.RunAsUser != 0 || *sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || *sc.Privileged || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("security context %+v: want root, no privilege escalation, unprivileged, read-only root", sc)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, agentCapabilities) {
		t.Errorf("capabilities %+v, want all dropped and %v added", sc.Capabilities, agentCapabilities)
	}
	if *pod.Spec.AutomountServiceAccountToken {
		t.Error("the pod mounts a service-account token")
	}
	var secret *corev1.SecretVolumeSource
	for _, v := range pod.Spec.Volumes {
		if v.Name == volumeAgentTLS {
			secret = v.Secret
		}
	}
	if secret == nil || secret.SecretName != agentSecretName(pod.Name) || *secret.DefaultMode != 0o400 {
		t.Fatalf("the agent's Secret volume %+v, want %s mode 0400", secret, agentSecretName(pod.Name))
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts[agentTLSDir]; !ok || !m.ReadOnly {
		t.Errorf("mounts %+v, want %s read-only", c.VolumeMounts, agentTLSDir)
	}
	if _, ok := mounts[runtime.SkillMount]; !ok {
		t.Errorf("mounts %+v, want the skill directory %s", c.VolumeMounts, runtime.SkillMount)
	}
}

func TestDataPathOption(t *testing.T) {
	for _, tc := range []struct {
		value string
		ok    bool
	}{{"", true}, {"exec", true}, {"agent", true}, {"grpc", false}} {
		t.Run(tc.value, func(t *testing.T) {
			_, err := DecodeOptions(runtime.Settings{"data_path": tc.value})
			if (err == nil) != tc.ok {
				t.Fatalf("data_path %q: %v", tc.value, err)
			}
		})
	}
}

func TestUsesAgent(t *testing.T) {
	k := &Kubernetes{ko: Options{DataPath: DataPathAgent}}
	for _, tc := range []struct {
		name string
		spec runtime.SandboxSpec
		want bool
	}{
		{"plain", runtime.SandboxSpec{}, true},
		{"skill", runtime.SandboxSpec{SkillDir: "/s"}, true},
		{"dependency layer", runtime.SandboxSpec{DepsDir: "/d"}, false},
		{"network", runtime.SandboxSpec{Network: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := k.usesAgent(tc.spec); got != tc.want {
				t.Errorf("usesAgent = %v, want %v", got, tc.want)
			}
		})
	}
	if (&Kubernetes{}).usesAgent(runtime.SandboxSpec{}) {
		t.Error("the exec data path uses the agent")
	}
}
