package deps

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
)

// A small wheel that unpacks hugely must not build a
// huge layer, and installer output must not be held without bound.

// fakeRuntime records the jobs it is given and answers with result.
type fakeRuntime struct {
	mu     sync.Mutex
	jobs   []runtime.Job
	result func(runtime.Job) *runtime.Result
}

func (f *fakeRuntime) Name() string                                { return "fake" }
func (f *fakeRuntime) Version(ctx context.Context) (string, error) { return "fake", nil }
func (f *fakeRuntime) Close() error                                { return nil }
func (f *fakeRuntime) Run(ctx context.Context, job runtime.Job) (*runtime.Result, error) {
	f.mu.Lock()
	f.jobs = append(f.jobs, job)
	f.mu.Unlock()
	if f.result == nil {
		return &runtime.Result{Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil
	}
	return f.result(job), nil
}

// bombWheel is a wheel of a few KiB whose one module unpacks to size bytes.
func bombWheel(t *testing.T, dir string, size int64) string {
	t.Helper()
	file := filepath.Join(dir, "bomb-1.0-py3-none-any.whl")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create("bomb/__init__.py")
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.Repeat([]byte("#"), 1<<20)
	for n := int64(0); n < size; n += int64(len(line)) {
		w.Write(line)
	}
	for _, e := range []string{"bomb-1.0.dist-info/METADATA", "bomb-1.0.dist-info/WHEEL", "bomb-1.0.dist-info/RECORD"} {
		if _, err := zw.Create(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// pythonRootFS is an image tree Inspect reads as python 3.11 with pip.
func pythonRootFS(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib/python3.11", "usr/lib/python3/dist-packages/pip"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/python3.11"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// fakePip is a host "python3" whose pip download copies wheel into --dest,
// after printing chatter bytes; it fails when fail is set.
func fakePip(t *testing.T, wheel string, chatter int64, fail bool) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "python3")
	exit := 0
	if fail {
		exit = 1
	}
	script := fmt.Sprintf(`#!/bin/sh
head -c %d /dev/zero | tr '\0' 'x'
echo
echo "ERROR: the last line of a chatty pip"
while [ $# -gt 0 ]; do
  if [ "$1" = --dest ]; then cp %q "$2/"; fi
  shift
done
exit %d
`, chatter, wheel, exit)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func limitsRequest(t *testing.T) Request {
	return Request{Image: "python", ImageDigest: "sha256:" + strings.Repeat("a", 64), RootFS: pythonRootFS(t),
		Set: &Set{Python: []Requirement{{Name: "bomb", Spec: "bomb==1.0", Source: "requirements.txt:1"}}}, Skill: "bomb-skill"}
}

// A wheel of a few KiB declaring 64 MiB is refused against an 8 MiB cap
// before anything is installed, naming both sizes.
func TestBuildRefusesWheelOverLayerCap(t *testing.T) {
	dir := t.TempDir()
	wheel := bombWheel(t, dir, 64<<20)
	if st, _ := os.Stat(wheel); st.Size() > 1<<20 {
		t.Fatalf("the test wheel is %d bytes, meant to be small", st.Size())
	}
	rt := &fakeRuntime{}
	b := &Builder{Store: OpenStore(t.TempDir()), Runtime: rt, Sources: Sources{FindLinks: []string{dir}},
		HostPython: fakePip(t, wheel, 0, false), MaxLayerBytes: 8 << 20}
	_, err := b.Build(context.Background(), limitsRequest(t))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	for _, w := range []string{`skill "bomb-skill"`, "64.0 MiB", "8.0 MiB", "max_layer_bytes", "bomb-1.0-py3-none-any.whl"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not name %q", err, w)
		}
	}
	if len(rt.jobs) != 0 {
		t.Errorf("%d install sandboxes started for a refused layer", len(rt.jobs))
	}
	if ls, _ := os.ReadDir(b.Store.Dir()); len(ls) != 0 {
		t.Errorf("a refused build left %v behind", ls)
	}
}

// The install sandbox itself is bounded by the cap (so unpacking stops at
// it), and what it reports back is checked again.
func TestInstallBoundedByLayerCap(t *testing.T) {
	const layerCap = 8 << 20
	for _, tc := range []struct {
		name   string
		result *runtime.Result
		want   error
		says   string
	}{
		{"ran out of room while unpacking", &runtime.Result{
			Stderr:  []byte("ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n"),
			Summary: outcome.Summary{Reason: runtime.ReasonExit, ExitCode: 1},
		}, ErrTooLarge, "while unpacking"},
		{"outputs over the cap", &runtime.Result{
			Outputs: []runtime.OutputFile{{Path: "out/python/a.py", Size: 6 << 20}},
			Summary: outcome.Summary{Reason: runtime.ReasonExit, OutputsTruncated: true, OutputsTruncatedBy: runtime.CapOutputBytes, OutputsOmittedBytes: 6 << 20},
		}, ErrTooLarge, "12.0 MiB"},
		{"output cut", &runtime.Result{
			Stderr:  []byte("lots\nERROR: bad wheel\n"),
			Summary: outcome.Summary{Reason: runtime.ReasonExit, ExitCode: 2, StderrTruncated: true},
		}, ErrBuild, "installer output cut at 262144 bytes"},
		{"fits", &runtime.Result{Outputs: []runtime.OutputFile{{Path: "out/python/a.py", Size: 1, Data: []byte("x")}}, Summary: outcome.Summary{Reason: runtime.ReasonExit}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			wheel := bombWheel(t, dir, 1<<20)
			rt := &fakeRuntime{result: func(runtime.Job) *runtime.Result { return tc.result }}
			b := &Builder{Store: OpenStore(t.TempDir()), Runtime: rt, Sources: Sources{FindLinks: []string{dir}},
				HostPython: fakePip(t, wheel, 0, false), MaxLayerBytes: layerCap}
			_, err := b.Build(context.Background(), limitsRequest(t))
			if (tc.want == nil) != (err == nil) || (tc.want != nil && (!errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says))) {
				t.Fatalf("got %v, want %v saying %q", err, tc.want, tc.says)
			}
			if len(rt.jobs) != 1 {
				t.Fatalf("%d install sandboxes", len(rt.jobs))
			}
			l := rt.jobs[0].Limits()
			if l.WorkdirBytes != layerCap || l.TmpBytes > layerCap+installSlack || l.OutputBytes != layerCap || l.OutputFileBytes != layerCap {
				t.Errorf("install limits %+v not bounded by the %d-byte cap", l, layerCap)
			}
		})
	}
}

// A chatty pip's output is kept as a bounded tail that says it was cut.
func TestChattyInstallOutputCapped(t *testing.T) {
	dir := t.TempDir()
	wheel := bombWheel(t, dir, 1<<10)
	b := &Builder{Store: OpenStore(t.TempDir()), Runtime: &fakeRuntime{}, Sources: Sources{FindLinks: []string{dir}},
		HostPython: fakePip(t, wheel, 32<<20, true)}
	_, err := b.Build(context.Background(), limitsRequest(t))
	if !errors.Is(err, ErrBuild) {
		t.Fatalf("got %v, want ErrBuild", err)
	}
	msg := err.Error()
	if len(msg) > 4<<10 || !strings.Contains(msg, "the last line of a chatty pip") || !strings.Contains(msg, "output cut") {
		t.Errorf("error of %d bytes: %.300s…", len(msg), msg)
	}
}

func TestTailBuffer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"under", []string{"ab", "cd"}, "abcd"},
		{"exact", []string{"abcdefgh"}, "abcdefgh"},
		{"one big write", []string{"0123456789"}, "[output cut: 2 of 10 bytes dropped, the last 8 kept]\n23456789"},
		{"many writes", []string{"0123", "4567", "89"}, "[output cut: 2 of 10 bytes dropped, the last 8 kept]\n23456789"},
		{"shifting", []string{"0123456", "78", "9"}, "[output cut: 2 of 10 bytes dropped, the last 8 kept]\n23456789"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTailBuffer(8)
			for _, w := range tc.writes {
				tb.Write([]byte(w))
			}
			if got := tb.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if cap(tb.buf) > 64 {
				t.Errorf("buffer grew to %d", cap(tb.buf))
			}
		})
	}
}

// tailed keeps the exit status and the tail of a chatty command's output,
// saying it was cut.
func TestTailedInstallCommand(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	tmp := t.TempDir()
	argv := tailed([]string{"sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x; echo; echo the-last-line >&2; exit 3"})
	script := strings.ReplaceAll(argv[2], "/tmp/", tmp+"/")
	cmd := exec.Command(argv[0], append([]string{argv[1], script}, argv[3:]...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit %v, want status 3", err)
	}
	out := stderr.String()
	if stdout.Len() != 0 || len(out) > outputTail+200 || !strings.Contains(out, "the-last-line") || !strings.Contains(out, "install output cut: the last 65536 of 200015 bytes") {
		t.Errorf("stdout %d bytes, stderr %d bytes: %.200q", stdout.Len(), len(out), out)
	}
}
