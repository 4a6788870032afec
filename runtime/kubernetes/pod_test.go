package kubernetes

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/egress"
)

const testDigest = "sha256:63eb9a88e0f72213fad96d624587e21a36493e366319ab3c91fdafaf98aef9f6"

func testJob() runtime.Job {
	return runtime.Job{
		Sandbox: runtime.SandboxSpec{
			ID:     "skillbox-run-1",
			RootFS: "/var/lib/skillbox/images/rootfs/x",
			Image:  runtime.ImageRef{Name: "python", Digest: testDigest},
			Limits: runtime.Limits{MemoryBytes: 256 << 20, CPUs: 0.5, WorkdirBytes: 64 << 20, TmpBytes: 16 << 20},
		},
		Invocation: runtime.Invocation{
			Args:   []string{"python3", "-c", "print(1)"},
			Env:    []string{"A=b"},
			Limits: runtime.Limits{Timeout: 2500 * time.Millisecond},
		},
	}
}

func TestPodSpec(t *testing.T) {
	pod, err := podSpec(testJob(), "ns1", "")
	if err != nil {
		t.Fatal(err)
	}
	spec := pod.Spec
	c := spec.Containers[0]
	mem := resource.MustParse("256Mi")
	cpu := resource.MustParse("500m")
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"namespace", pod.Namespace == "ns1"},
		{"name", pod.Name == "skillbox-run-1"},
		{"labels", pod.Labels[LabelManagedBy] == ManagedBy && pod.Labels[LabelRun] == pod.Name},
		{"run id annotation", pod.Annotations[AnnotationRunID] == "skillbox-run-1"},
		{"runtimeClassName gvisor", spec.RuntimeClassName != nil && *spec.RuntimeClassName == "gvisor"},
		{"no service account token", spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken},
		{"no service links", spec.EnableServiceLinks != nil && !*spec.EnableServiceLinks},
		{"no host namespaces", !spec.HostNetwork && !spec.HostPID && !spec.HostIPC},
		{"restart never", spec.RestartPolicy == corev1.RestartPolicyNever},
		{"deadline: timeout rounded up, plus the boot time", spec.ActiveDeadlineSeconds != nil && *spec.ActiveDeadlineSeconds == 3+60},
		{"pod runAsNonRoot 65534", spec.SecurityContext.RunAsNonRoot != nil && *spec.SecurityContext.RunAsNonRoot &&
			*spec.SecurityContext.RunAsUser == 65534 && *spec.SecurityContext.RunAsGroup == 65534},
		{"pod seccomp RuntimeDefault", spec.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
		{"container seccomp RuntimeDefault", c.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
		{"container runAsNonRoot", *c.SecurityContext.RunAsNonRoot && *c.SecurityContext.RunAsUser == 65534},
		{"read-only root", *c.SecurityContext.ReadOnlyRootFilesystem},
		{"not privileged", !*c.SecurityContext.Privileged},
		{"no privilege escalation", !*c.SecurityContext.AllowPrivilegeEscalation},
		{"drop ALL", slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(c.SecurityContext.Capabilities.Add) == 0},
		{"image by digest", c.Image == "skillbox.local/python@"+testDigest},
		{"pull if not present", c.ImagePullPolicy == corev1.PullIfNotPresent},
		{"holder outlives no deadline by much", slices.Equal(c.Command, []string{"sh", "-c", "trap 'exit 0' USR1; until sleep 93 & wait $!; do :; done"})},
		{"cwd /work", c.WorkingDir == "/work"},
		{"no env in the pod", len(c.Env) == 0 && len(c.EnvFrom) == 0},
		{"memory request = limit", c.Resources.Requests.Memory().Equal(mem) && c.Resources.Limits.Memory().Equal(mem)},
		{"cpu request = limit", c.Resources.Requests.Cpu().Equal(cpu) && c.Resources.Limits.Cpu().Equal(cpu)},
		{"mounts", len(c.VolumeMounts) == 3 && c.VolumeMounts[0].MountPath == "/work" && c.VolumeMounts[1].MountPath == "/tmp" &&
			c.VolumeMounts[2].MountPath == frameDir},
		{"work tmpfs of the workdir limit", spec.Volumes[0].EmptyDir.Medium == corev1.StorageMediumMemory &&
			spec.Volumes[0].EmptyDir.SizeLimit.Equal(resource.MustParse("64Mi"))},
		{"tmp tmpfs of the tmp limit", spec.Volumes[1].EmptyDir.Medium == corev1.StorageMediumMemory &&
			spec.Volumes[1].EmptyDir.SizeLimit.Equal(resource.MustParse("16Mi"))},
		{"frame tmpfs", spec.Volumes[2].EmptyDir.Medium == corev1.StorageMediumMemory &&
			spec.Volumes[2].EmptyDir.SizeLimit.Equal(resource.MustParse("4Mi"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.ok {
				t.Errorf("pod spec: %+v", pod)
			}
		})
	}
}

func TestPodSpecDefaults(t *testing.T) {
	job := testJob()
	job.Sandbox.Limits, job.Invocation.Limits = runtime.Limits{}, runtime.Limits{}
	pod, err := podSpec(job, "ns1", "")
	if err != nil {
		t.Fatal(err)
	}
	d := runtime.DefaultLimits
	c := pod.Spec.Containers[0]
	if got := *pod.Spec.ActiveDeadlineSeconds; got != int64((d.Timeout+runtime.BootTimeout)/time.Second) {
		t.Errorf("deadline %d, want the default timeout %s", got, d.Timeout)
	}
	if got := c.Resources.Limits.Memory().Value(); got != d.MemoryBytes {
		t.Errorf("memory %d, want the default %d", got, d.MemoryBytes)
	}
	if got := pod.Spec.Volumes[0].EmptyDir.SizeLimit.Value(); got != d.WorkdirBytes {
		t.Errorf("workdir %d, want the default %d", got, d.WorkdirBytes)
	}
}

func TestPodSpecRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*runtime.Job)
		kind error
		want string
	}{
		{"no digest", func(j *runtime.Job) { j.Sandbox.Image.Digest = "" }, runtime.ErrInvalidJob, "by digest only"},
		{"no image", func(j *runtime.Job) { j.Sandbox.Image = runtime.ImageRef{} }, runtime.ErrInvalidJob, "no digest"},
		{"bad digest", func(j *runtime.Job) { j.Sandbox.Image.Digest = "sha256:abc" }, runtime.ErrInvalidJob, "64 lowercase hex"},
		{"bad name", func(j *runtime.Job) { j.Sandbox.Image.Name = "Py thon" }, runtime.ErrInvalidJob, "cannot name an image"},
		{"open network", func(j *runtime.Job) { j.Sandbox.Network = true }, runtime.ErrUnavailable, "open network"},
		{"egress secrets", func(j *runtime.Job) { j.Sandbox.Egress = &egress.Config{Secrets: []egress.Secret{{Name: "TOKEN"}}} }, runtime.ErrUnavailable, "secrets"},
		{"session", func(j *runtime.Job) { j.Sandbox.Session = &runtime.SessionMounts{} }, runtime.ErrUnavailable, "sessions"},
		{"command with =", func(j *runtime.Job) { j.Invocation.Args = []string{"A=b", "x"} }, runtime.ErrUnavailable, "'='"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := testJob()
			tc.edit(&job)
			pod, err := podSpec(job, "ns1", "")
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("podSpec = %v, %v; want %v saying %q", pod, err, tc.kind, tc.want)
			}
		})
	}
}

func TestRunDeadline(t *testing.T) {
	for _, tc := range []struct {
		name        string
		up, timeout time.Duration
		current     int64
		want        int64
	}{
		{"up 2.1 s, timeout 3 s", 2100 * time.Millisecond, 3 * time.Second, 63, 6},
		{"whole seconds", 2 * time.Second, 3 * time.Second, 63, 5},
		{"never past the pod's deadline", 61 * time.Second, 3 * time.Second, 63, 63},
		{"sub-second timeout", 0, time.Millisecond, 61, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runDeadline(tc.up, tc.timeout, tc.current); got != tc.want {
				t.Errorf("runDeadline(%s, %s, %d) = %d, want %d", tc.up, tc.timeout, tc.current, got, tc.want)
			}
		})
	}
}

func TestImageReference(t *testing.T) {
	for _, tc := range []struct {
		name string
		img  runtime.ImageRef
		want string
	}{
		{"skillbox image", runtime.ImageRef{Name: "python", Digest: testDigest}, "skillbox.local/python@" + testDigest},
		{"registry tag", runtime.ImageRef{Name: "py", Ref: "registry.local:5000/lib/python:3.12", Digest: testDigest}, "registry.local:5000/lib/python@" + testDigest},
		{"registry no tag", runtime.ImageRef{Name: "py", Ref: "registry.local:5000/lib/python", Digest: testDigest}, "registry.local:5000/lib/python@" + testDigest},
		{"registry digest", runtime.ImageRef{Name: "py", Ref: "docker.io/library/python@" + testDigest, Digest: testDigest}, "docker.io/library/python@" + testDigest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ImageReference(tc.img)
			if err != nil || got != tc.want {
				t.Errorf("ImageReference = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestPodName(t *testing.T) {
	long := strings.Repeat("a", 64)
	for _, tc := range []struct {
		id, want string
	}{
		{"skillbox-abc123", "skillbox-abc123"},
		{"run1", "run1"},
		{"Run_1", ""},
		{"run_1", ""},
		{"run-", ""},
		{long, ""},
		{"A_" + long[:62], ""},
	} {
		t.Run(tc.id, func(t *testing.T) {
			got := podName(tc.id)
			if tc.want != "" && got != tc.want {
				t.Errorf("podName(%q) = %q, want %q", tc.id, got, tc.want)
			}
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("podName(%q) = %q: %v", tc.id, got, errs)
			}
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
				t.Errorf("podName(%q) = %q as a label value: %v", tc.id, got, errs)
			}
		})
	}
	// Ids that differ map to names that differ.
	seen := map[string]string{}
	for _, id := range []string{"run_1", "run-1", "Run-1", "RUN_1", "run1", long, long[:63] + "b"} {
		n := podName(id)
		if other, ok := seen[n]; ok {
			t.Errorf("ids %q and %q both map to %q", id, other, n)
		}
		seen[n] = id
	}
}

func TestDecodeOptions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings runtime.Settings
		want     Options
		err      string
	}{
		{"empty", nil, Options{}, ""},
		{"both", runtime.Settings{"kubeconfig": "/k", "namespace": "runs"}, Options{Kubeconfig: "/k", Namespace: "runs"}, ""},
		{"unknown", runtime.Settings{"address": "/x"}, Options{}, "no setting address"},
		{"wrong kind", runtime.Settings{"namespace": []string{"a"}}, Options{}, "want a string"},
		{"agent", runtime.Settings{"data_path": "agent", "cpu_request": "25%"}, Options{DataPath: DataPathAgent, CPURequestPercent: 25}, ""},
		{"bad data path", runtime.Settings{"data_path": "ssh"}, Options{}, `data_path = "ssh"`},
		{"cpu request without %", runtime.Settings{"cpu_request": "25"}, Options{}, `cpu_request = "25"`},
		{"cpu request of nothing", runtime.Settings{"cpu_request": "0%"}, Options{}, `from "1%" to "100%"`},
		{"cpu request over the limit", runtime.Settings{"cpu_request": "150%"}, Options{}, `cpu_request = "150%"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := runtime.New(Name, runtime.Options{Settings: tc.settings})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("New = %v, want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := k.(*Kubernetes).ko; got != tc.want {
				t.Errorf("options %+v, want %+v", got, tc.want)
			}
		})
	}
	k, err := New(runtime.Options{})
	if err != nil || k.Namespace() != DefaultNamespace {
		t.Errorf("New() = %v namespace %q, want the default %q", err, k.Namespace(), DefaultNamespace)
	}
}

func TestVersionWithoutKubeconfig(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	k, err := New(runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Version(t.Context()); !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "no kubeconfig") {
		t.Errorf("Version = %v, want ErrUnavailable saying no kubeconfig", err)
	}
	k, err = New(runtime.Options{Backend: Options{Kubeconfig: "/nonexistent/kubeconfig"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Version(t.Context()); !errors.Is(err, runtime.ErrUnavailable) || !strings.Contains(err.Error(), "/nonexistent/kubeconfig") {
		t.Errorf("Version = %v, want ErrUnavailable naming the kubeconfig", err)
	}
}

// A job with skill files and a dependency layer runs the image nodeImage
// names (the derived image), and the pod still names its interpreter
// image.
func TestPodSpecDerivedImage(t *testing.T) {
	job := testJob()
	job.Sandbox.SkillDir, job.Sandbox.DepsDir = "/skills/x", "/layers/sha256-x/tree"
	derived := "127.0.0.1:5000/sb/python@sha256:" + strings.Repeat("cd", 32)
	pod, err := podSpec(job, "ns1", derived)
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if c.Image != derived || pod.Annotations[AnnotationImage] != "python@"+testDigest || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("image %q annotation %q, want %q on a read-only root and the interpreter image annotated", c.Image, pod.Annotations[AnnotationImage], derived)
	}
}

func TestRequestCPU(t *testing.T) {
	for _, tc := range []struct {
		limit        float64
		percent      int
		wantRequestM int64
	}{{1, 0, 1000}, {1, 100, 1000}, {1, 25, 250}, {0.2, 10, 20}, {0.001, 1, 1}} {
		t.Run(fmt.Sprintf("%v cores at %d%%", tc.limit, tc.percent), func(t *testing.T) {
			job := testJob()
			job.Sandbox.Limits.CPUs = tc.limit
			pod, err := podSpec(job, "skillbox", "")
			if err != nil {
				t.Fatal(err)
			}
			requestCPU(pod, tc.percent)
			r := pod.Spec.Containers[0].Resources
			if got := r.Requests.Cpu().MilliValue(); got != tc.wantRequestM {
				t.Errorf("request %dm, want %dm", got, tc.wantRequestM)
			}
			if got := r.Limits.Cpu().MilliValue(); got != int64(tc.limit*1000) && tc.limit >= 0.001 {
				t.Errorf("limit %dm changed, want %v cores", got, tc.limit)
			}
		})
	}
}
