package kubernetes

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
)

// runFrame runs a frame with the host's sh, as the pod runs it
// (jobCommand), and returns its stdout and exit code.
func runFrame(t *testing.T, frame []byte, stdin string) (string, int) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh:", err)
	}
	f := filepath.Join(t.TempDir(), "job")
	if err := os.WriteFile(f, frame, 0o400); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", f)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "IMAGE_ONLY=1"}
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("sh %s: %v", f, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

func TestJobFrame(t *testing.T) {
	odd := []string{
		"plain", "with spaces  and\ttabs", `single ' quote`, `double " quote`, "'", "''", `'\''`,
		"new\nline\n", "a=b=c", "=", "$(touch /tmp/x) `id` $HOME ${A}", `back\slash\`, "*", "-n", "", "\xff\xfe not UTF-8", "; exit 3",
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"plain", []string{"A=b"}, []string{"x"}},
		{"odd values", func() []string {
			var env []string
			for i, v := range odd {
				env = append(env, fmt.Sprintf("V%d=%s", i, v))
			}
			return env
		}(), odd},
		{"no env", nil, []string{"-"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := testJob()
			job.Invocation.Env, job.Invocation.ModuleEnv = tc.env, []string{"PYTHONPATH=/deps x"}
			// The environment arrives exactly (env -0: NUL-separated).
			job.Invocation.Args = []string{"env", "-0"}
			frame, err := jobFrame(job, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, code := runFrame(t, frame, "")
			wantEnv, _ := runtime.ContainerEnv(tc.env)
			wantEnv = append(wantEnv, job.Invocation.ModuleEnv...)
			if got := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00"); code != 0 || !slices.Equal(got, wantEnv) {
				t.Errorf("env: exit %d\n got %q\nwant %q", code, got, wantEnv)
			}
			// The argv arrives exactly.
			job.Invocation.Args = append([]string{"printf", `%s\0`}, tc.args...)
			if frame, err = jobFrame(job, nil); err != nil {
				t.Fatal(err)
			}
			out, code = runFrame(t, frame, "")
			if got := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00"); code != 0 || !slices.Equal(got, tc.args) {
				t.Errorf("argv: exit %d\n got %q\nwant %q", code, got, tc.args)
			}
		})
	}
	t.Run("exit code and stdin", func(t *testing.T) {
		job := testJob()
		job.Invocation.Args = []string{"sh", "-c", "cat; exit 42"}
		frame, err := jobFrame(job, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out, code := runFrame(t, frame, "in"); out != "in" || code != 42 {
			t.Errorf("stdout %q exit %d, want %q 42 (the job's own code, not a wrapper's)", out, code, "in")
		}
	})
	t.Run("refused", func(t *testing.T) {
		job := testJob()
		job.Invocation.Env = []string{"LD_PRELOAD=/x"}
		if _, err := jobFrame(job, nil); !errors.Is(err, runtime.ErrInvalidJob) {
			t.Errorf("frame with LD_PRELOAD: %v, want ErrInvalidJob", err)
		}
	})
}

// The job exec's command is fixed: no argument or variable of a job is
// ever in an exec URL.
func TestExecCommandsCarryNoJobData(t *testing.T) {
	for _, argv := range [][]string{jobCommand, deliverCommand, collectCommand} {
		for _, a := range argv {
			if strings.Contains(a, "print(1)") || strings.Contains(a, "A=b") {
				t.Errorf("exec command %q holds the job's data", argv)
			}
		}
	}
}

type tarEntry struct {
	name string
	typ  byte
	mode int64
	data string
}

func readTar(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	var got []tarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeSymlink {
			data = []byte(h.Linkname)
		}
		if h.Uid != runtime.ContainerUID || h.Gid != runtime.ContainerGID {
			t.Errorf("%s owned by %d:%d, want the container user", h.Name, h.Uid, h.Gid)
		}
		got = append(got, tarEntry{h.Name, h.Typeflag, h.Mode, string(data)})
	}
}

func TestWriteDelivery(t *testing.T) {
	files := []runtime.InputFile{
		{Name: "a.txt", Data: []byte("a")},
		{Name: "deep/er/b.sh", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
		{Name: "ro", Kind: runtime.InputDir, Mode: 0o500},
		{Name: "deep/link", Kind: runtime.InputSymlink, Target: "../a.txt"},
		{Name: "empty", Kind: runtime.InputDir},
	}
	if err := runtime.ValidateInputs(files, 1<<20); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeDelivery(&buf, []byte("exec env -i 'A=b' 'x'\n"), files, time.Now()); err != nil {
		t.Fatal(err)
	}
	want := []tarEntry{
		{"run/skillbox/job", tar.TypeReg, 0o400, "exec env -i 'A=b' 'x'\n"},
		{"work/a.txt", tar.TypeReg, 0o644, "a"},
		{"work/deep/", tar.TypeDir, 0o755, ""},
		{"work/deep/er/", tar.TypeDir, 0o755, ""},
		{"work/deep/er/b.sh", tar.TypeReg, 0o755, "#!/bin/sh\n"},
		{"work/ro/", tar.TypeDir, 0o500, ""},
		{"work/deep/link", tar.TypeSymlink, 0o777, "../a.txt"},
		{"work/empty/", tar.TypeDir, 0o755, ""},
		{"work/outputs/", tar.TypeDir, 0o755, ""},
	}
	if got := readTar(t, bytes.NewReader(buf.Bytes())); !slices.Equal(got, want) {
		t.Errorf("delivery stream\n got %v\nwant %v", got, want)
	}

	// A given outputs/ keeps its mode and is not made twice.
	buf.Reset()
	if err := writeDelivery(&buf, nil, []runtime.InputFile{{Name: "outputs/x", Data: []byte("x")}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range readTar(t, &buf) {
		if e.name == "work/outputs/" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("outputs/ made %d times, want once", n)
	}

	// GNU tar, as the pod's deliverCommand runs it, makes what the stream
	// says (run as root here: the owners are the container user's).
	if os.Geteuid() != 0 {
		t.Skip("extracting with the modes and owners of the stream needs root")
	}
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar:", err)
	}
	buf.Reset()
	if err := writeDelivery(&buf, []byte("frame"), files, time.Now()); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, d := range []string{"run/skillbox", "work"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(deliverCommand[0], append(slices.Clone(deliverCommand[1:len(deliverCommand)-1]), root)...)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	for name, mode := range map[string]os.FileMode{
		"run/skillbox/job": 0o400, "work/a.txt": 0o644, "work/deep/er/b.sh": 0o755, "work/ro": os.ModeDir | 0o500,
		"work/deep": os.ModeDir | 0o755, "work/outputs": os.ModeDir | 0o755, "work/deep/link": os.ModeSymlink | 0o777,
	} {
		st, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if st.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", name, st.Mode(), mode)
		}
	}
}
