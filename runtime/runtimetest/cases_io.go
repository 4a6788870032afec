package runtimetest

import (
	"strings"
	"testing"

	"github.com/skillbox/skillbox/runtime"
)

// The input and output cases: inputs written into the workdir, directory
// inputs round-tripped, hostile outputs not followed, many outputs, and the
// output caps.
func ioCases() []Case {
	return []Case{
		{
			Name: "inputs_and_outputs",
			Skill: map[string]string{"scripts/io.py": `import os
print(open("data.csv").read(), end="")
print(oct(os.stat("run.sh").st_mode & 0o777))
os.makedirs("outputs/sub", exist_ok=True)
open("outputs/result.txt", "w").write("result\n")
open("outputs/sub/nested.txt", "w").write("nested\n")
os.symlink("/etc/passwd", "outputs/passwd-link")
os.mkfifo("outputs/fifo")
`},
			Files: []runtime.InputFile{
				{Name: "data.csv", Data: []byte("a,b\n1,2\n")},
				{Name: "run.sh", Data: []byte("#!/bin/sh\n"), Mode: 0o755},
			},
			Args: Py("io.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if string(res.Stdout) != "a,b\n1,2\n0o755\n" {
					t.Errorf("inputs not seen: %q %s", res.Stdout, res.Stderr)
				}
				got := map[string]string{}
				for _, o := range res.Outputs {
					got[o.Path] = string(o.Data)
				}
				// Unchanged inputs (data.csv, run.sh) are not outputs.
				if len(got) != 2 || got["outputs/result.txt"] != "result\n" || got["outputs/sub/nested.txt"] != "nested\n" {
					t.Errorf("outputs %v", got)
				}
				sk := strings.Join(res.OutputsSkipped, "\n")
				// gVisor keeps a FIFO made on a gofer mount inside the sandbox;
				// runc leaves it on the host tmpfs, where it must be skipped.
				if !strings.Contains(sk, "passwd-link: symlink") || (c.Kernel == KernelHost && !strings.Contains(sk, "fifo: fifo")) {
					t.Errorf("skipped %q", res.OutputsSkipped)
				}
			},
		},
		{
			Name: "directory_inputs_round_trip",
			Skill: map[string]string{"scripts/tree.py": `import os
for root, dirs, files in sorted(os.walk(".")):
    dirs.sort()
    for n in sorted(dirs + files):
        p = os.path.join(root, n)[2:]
        kind = "L" if os.path.islink(p) else "D" if os.path.isdir(p) else "F"
        print(kind, p, oct(os.lstat(p).st_mode & 0o777))
print("link", os.readlink("unpacked/link"))
print(open("unpacked/ppt/slides/slide1.xml").read())
open("unpacked/ppt/presentation.xml", "w").write("<changed/>")
os.makedirs("unpacked/ppt/media", exist_ok=True)
open("unpacked/ppt/media/image1.png", "wb").write(b"\x89PNG")
open("top.txt", "w").write("top")
os.makedirs("a/b/c/d", exist_ok=True)
open("a/b/c/d/deep.txt", "w").write("deep")
# HOME is writable and outside /work: a tool profile there is no output.
os.makedirs(os.path.expanduser("~/.config/libreoffice"), exist_ok=True)
open(os.path.expanduser("~/.config/libreoffice/profile.xcu"), "w").write("profile")
print("home", os.environ["HOME"], os.path.expanduser("~"))
`},
			Files: []runtime.InputFile{
				{Name: "unpacked", Kind: runtime.InputDir},
				{Name: "unpacked/[Content_Types].xml", Data: []byte("<Types/>")},
				{Name: "unpacked/ppt/presentation.xml", Data: []byte("<p/>")},
				{Name: "unpacked/ppt/slides/slide1.xml", Data: []byte("<slide1/>"), Mode: 0o600},
				{Name: "unpacked/ppt/empty", Kind: runtime.InputDir, Mode: 0o750},
				{Name: "unpacked/link", Kind: runtime.InputSymlink, Target: "../../etc/passwd"},
			},
			Args: Py("tree.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				want := `D outputs 0o755
D unpacked 0o755
F unpacked/[Content_Types].xml 0o644
L unpacked/link 0o777
D unpacked/ppt 0o755
D unpacked/ppt/empty 0o750
F unpacked/ppt/presentation.xml 0o644
D unpacked/ppt/slides 0o755
F unpacked/ppt/slides/slide1.xml 0o600
link ../../etc/passwd
<slide1/>
home /tmp /tmp
`
				if string(res.Stdout) != want {
					t.Errorf("tree in the sandbox:\n%s\nwant:\n%s\nstderr: %s", res.Stdout, want, res.Stderr)
				}
				var got []string
				for _, o := range res.Outputs {
					got = append(got, o.Path+"="+string(o.Data))
				}
				// Changed and new files anywhere in /work, with their paths;
				// unchanged inputs and the input link are not reported.
				if w := "a/b/c/d/deep.txt=deep,top.txt=top,unpacked/ppt/media/image1.png=\x89PNG,unpacked/ppt/presentation.xml=<changed/>"; strings.Join(got, ",") != w {
					t.Errorf("outputs %q, want %q", got, w)
				}
				if len(res.OutputsSkipped) != 0 || res.OutputsTruncated {
					t.Errorf("skipped %q truncated %v", res.OutputsSkipped, res.OutputsTruncated)
				}
			},
		},
		{
			Name: "hostile_outputs_not_followed",
			Skill: map[string]string{"scripts/hostile.py": `import os, socket
os.symlink("/etc/passwd", "abs-link")
os.symlink("../../../../etc/shadow", "rel-escape")
os.symlink("nowhere", "dangling")
os.symlink("/tmp", "dirlink")
open("dirlink/through.txt", "w").write("via the link")
os.makedirs("outputs", exist_ok=True)
os.symlink("/etc", "outputs/etc")
os.mkfifo("fifo")
s = socket.socket(socket.AF_UNIX)
s.bind("sock")
open("outputs/real.txt", "w").write("real")
`},
			Args: Py("hostile.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if len(res.Outputs) != 1 || res.Outputs[0].Path != "outputs/real.txt" || string(res.Outputs[0].Data) != "real" {
					var paths []string
					for _, o := range res.Outputs {
						paths = append(paths, o.Path)
					}
					t.Errorf("outputs %q, want only outputs/real.txt", paths)
				}
				sk := strings.Join(res.OutputsSkipped, "\n")
				for _, w := range []string{"abs-link: symlink", "rel-escape: symlink", "dangling: symlink", "dirlink: symlink", "outputs/etc: symlink"} {
					if !strings.Contains(sk, w) {
						t.Errorf("skipped %q lacks %q", res.OutputsSkipped, w)
					}
				}
				// gVisor keeps FIFOs and sockets made on a gofer mount inside
				// the sandbox; runc leaves them on the host tmpfs.
				if c.Kernel == KernelHost && (!strings.Contains(sk, "fifo: fifo") || !strings.Contains(sk, "sock: socket")) {
					t.Errorf("skipped %q lacks the fifo and the socket", res.OutputsSkipped)
				}
			},
		},
		{
			Name:  "five_thousand_outputs",
			Skill: map[string]string{"scripts/many.py": "import os\nfor d in range(50):\n    os.makedirs(f'parts/p{d:02}', exist_ok=True)\n    for f in range(100):\n        open(f'parts/p{d:02}/{f:03}.xml', 'w').write(f'<x n=\"{d}.{f}\"/>')\n"},
			Args:  Py("many.py"),
			Check: func(t *testing.T, c *CaseEnv, res *runtime.Result) {
				WantExit(t, res, 0, runtime.ReasonExit)
				if len(res.Outputs) != 5000 || res.OutputsTruncated || len(res.OutputsSkipped) != 0 {
					t.Fatalf("%d outputs, truncated %v, skipped %q", len(res.Outputs), res.OutputsTruncated, res.OutputsSkipped)
				}
				if o := res.Outputs[4999]; o.Path != "parts/p49/099.xml" || string(o.Data) != `<x n="49.99"/>` {
					t.Errorf("last output %s=%q", o.Path, o.Data)
				}
			},
		},
		CapCase(runtime.CapOutputFiles, runtime.Limits{OutputFiles: 2}, 2, 2, 1000+1),
		CapCase(runtime.CapOutputBytes, runtime.Limits{OutputBytes: 10}, 3, 1, 1000),
		CapCase(runtime.CapOutputFileBytes, runtime.Limits{OutputFileBytes: 100}, 3, 1, 1000),
	}
}
