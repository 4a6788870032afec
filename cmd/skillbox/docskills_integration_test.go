//go:build integration

package main

// Skill files and shell scripts end to end, with the real binary and the
// default config: a template a script copies from its skill stays editable (the
// snapshot keeps the author's modes) while the skill stays unwritable by
// any path in the sandbox and unreachable by other uids on the host; a .sh
// of a document skill calling pdfinfo, qpdf and soffice runs (in the image
// that has them, with the reason in the audit); skills check names a
// program a script starts that no image has.
//
//	go test -tags integration -p 1 -count=1 -run 'TestSkillSnapshotModes|TestShellScriptTools' ./cmd/skillbox/

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// docsSkill writes skill "docs25" (with a nonce, so its digest and its
// snapshot are this test's own) under a fresh root the sandbox uid can
// read, and returns the root and the nonce.
func docsSkill(t *testing.T) (root, nonce string) {
	t.Helper()
	f := newRunFixture(t)
	b := make([]byte, 8)
	rand.Read(b)
	nonce = hex.EncodeToString(b)
	dir := filepath.Join(f.root, "docs25")
	files := map[string]string{
		"SKILL.md":              "---\nname: docs25\ndescription: Document skill for the integration tests. Use only in tests.\n---\n# docs25\n\nnonce " + nonce + "\n",
		"assets/template.txt":   "template\n",
		"assets/tpl/page.txt":   "page\n",
		"scripts/fill.py":       fillPy,
		"scripts/tool.sh":       "echo tool\n",
		"scripts/pdf.sh":        "#!/bin/bash\nset -euo pipefail\npdfinfo /skill/assets/one.pdf | grep -E '^(Pages|PDF version):'\nqpdf --check /skill/assets/one.pdf > check.txt\nhead -n 1 check.txt\nsoffice --version\n",
		"scripts/pdfversion.sh": "pdfinfo -v 2>&1 | head -n 1\n",
		"scripts/missing.sh":    "jq -n 1\nnosuchprog25 --help\n",
		"assets/one.pdf":        onePagePDF(),
	}
	for p, s := range files {
		runItWriteFile(t, filepath.Join(dir, p), s)
	}
	// The author's modes: an executable, a group-writable file.
	os.Chmod(filepath.Join(dir, "scripts", "tool.sh"), 0o755)
	os.Chmod(filepath.Join(dir, "assets", "tpl", "page.txt"), 0o664)
	return f.root, nonce
}

// fillPy copies a template and a template directory into /work and edits
// the copies, then tries every way to change the skill itself.
const fillPy = `import os, shutil
shutil.copy("/skill/assets/template.txt", "filled.txt")
with open("filled.txt", "a") as f:
    f.write("edited\n")
shutil.copytree("/skill/assets/tpl", "tpl")
with open("tpl/page.txt", "a") as f:
    f.write("more\n")
with open("tpl/new.txt", "w") as f:
    f.write("new\n")
print("mode template", oct(os.stat("/skill/assets/template.txt").st_mode & 0o7777))
print("mode tool", oct(os.stat("/skill/scripts/tool.sh").st_mode & 0o7777))
print("mode page", oct(os.stat("/skill/assets/tpl/page.txt").st_mode & 0o7777))

def attempt(what, fn):
    try:
        fn()
        print("WRITABLE", what)
    except OSError as e:
        print("refused", what, e.errno)

for base in ("/skill", "/proc/self/root/skill"):
    for rel in ("assets/template.txt", "scripts/fill.py", "assets/tpl/page.txt"):
        p = base + "/" + rel
        attempt("append " + p, lambda: open(p, "a").write("x"))
        attempt("chmod " + p, lambda: os.chmod(p, 0o777))
        attempt("truncate " + p, lambda: os.truncate(p, 0))
        attempt("utime " + p, lambda: os.utime(p, (0, 0)))
        attempt("unlink " + p, lambda: os.unlink(p))
        attempt("rename " + p, lambda: os.rename(p, p + ".x"))
        attempt("link " + p, lambda: os.link(p, "/work/hard"))
    attempt("create " + base, lambda: open(base + "/assets/new.txt", "w").write("x"))
    attempt("mkdir " + base, lambda: os.mkdir(base + "/assets/newdir"))
    attempt("chmod dir " + base, lambda: os.chmod(base + "/assets", 0o777))
print("template now", open("/skill/assets/template.txt").read().strip())
`

// onePagePDF is a valid one-page PDF (its xref offsets computed).
func onePagePDF() string {
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>",
	}
	var b strings.Builder
	b.WriteString("%PDF-1.4\n")
	var offs []int
	for i, o := range objs {
		offs = append(offs, b.Len())
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	x := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, o := range offs {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, x)
	return b.String()
}

// docsSnapshot finds the snapshot copy of the skill with this nonce.
func docsSnapshot(t *testing.T, nonce string) string {
	t.Helper()
	dirs, _ := filepath.Glob("/run/skillbox/snapshots/v-*")
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "SKILL.md")); err == nil && strings.Contains(string(b), nonce) {
			return d
		}
	}
	t.Fatalf("no snapshot of the test skill under /run/skillbox/snapshots (%d copies)", len(dirs))
	return ""
}

// asNobody runs argv as uid and gid 65534 and returns its combined output
// and whether it succeeded.
func asNobody(argv ...string) (string, bool) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

func TestSkillSnapshotModes(t *testing.T) {
	for _, rt := range []string{"runsc", "runc"} {
		t.Run(rt, func(t *testing.T) {
			runItNeed(t, rt)
			runItNeedImage(t, "python")
			root, nonce := docsSkill(t)
			out := filepath.Join(t.TempDir(), "out")
			o := runItExec(t, "run", "--runtime", rt, "--root", root, "--outputs", out, "docs25", "scripts/fill.py")
			if o.code != 0 {
				t.Fatalf("copying a template and editing the copy failed with the default config:\n%s", o)
			}
			for _, want := range []string{"mode template 0o644", "mode tool 0o755", "mode page 0o644", "template now template"} {
				if !strings.Contains(o.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, o)
				}
			}
			if strings.Contains(o.stdout, "WRITABLE") || strings.Count(o.stdout, "refused") != 2*(3*7+3) {
				t.Errorf("the skill is writable in the sandbox:\n%s", o)
			}
			for rel, want := range map[string]string{"filled.txt": "template\nedited\n", "tpl/page.txt": "page\nmore\n", "tpl/new.txt": "new\n"} {
				if b, err := os.ReadFile(filepath.Join(out, rel)); err != nil || string(b) != want {
					t.Errorf("output %s = %q (%v), want %q", rel, b, err, want)
				}
			}

			// On the host: the copy keeps the modes, its parent stays
			// root's alone, and another uid reaches nothing in it.
			snap := docsSnapshot(t, nonce)
			if st, err := os.Lstat("/run/skillbox/snapshots"); err != nil || st.Mode().Perm() != 0o700 || st.Sys().(*syscall.Stat_t).Uid != 0 {
				t.Fatalf("/run/skillbox/snapshots: %v %v, want root's 0700", st.Mode(), err)
			}
			for rel, want := range map[string]os.FileMode{"assets/template.txt": 0o644, "scripts/tool.sh": 0o755, "assets/tpl/page.txt": 0o644} {
				if st, err := os.Lstat(filepath.Join(snap, rel)); err != nil || st.Mode().Perm() != want {
					t.Errorf("%s in the snapshot: %v %v, want %v", rel, st.Mode(), err, want)
				}
			}
			file := filepath.Join(snap, "assets", "template.txt")
			for _, argv := range [][]string{
				{"cat", file},
				{"sh", "-c", "echo x >> " + file},
				{"ls", snap},
				{"stat", file},
				{"touch", filepath.Join(snap, "new")},
			} {
				if out, ok := asNobody(argv...); ok {
					t.Errorf("uid 65534 ran %q on the snapshot:\n%s", argv, out)
				}
			}
			if b, _ := os.ReadFile(file); string(b) != "template\n" {
				t.Errorf("the snapshot's template changed: %q", b)
			}
		})
	}
}

func TestShellScriptTools(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "python")
	runItNeedImage(t, "shell")
	root, _ := docsSkill(t)

	t.Run("pdfinfo qpdf soffice from a .sh, default config", func(t *testing.T) {
		o := runItExec(t, "run", "--runtime", "runsc", "--root", root, "--json", "docs25", "scripts/pdf.sh")
		var res struct {
			ExitCode int    `json:"exit_code"`
			Stdout   string `json:"stdout"`
			Image    string `json:"image"`
		}
		if err := json.Unmarshal([]byte(o.stdout), &res); err != nil {
			t.Fatalf("%v\n%s", err, o)
		}
		if o.code != 0 || res.ExitCode != 0 {
			t.Fatalf("the .sh calling pdfinfo, qpdf and soffice failed:\n%s", o)
		}
		for _, want := range []string{"Pages:           1", "checking /skill/assets/one.pdf", "LibreOffice"} {
			if !strings.Contains(res.Stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, res.Stdout)
			}
		}
		if res.Image != "python" {
			t.Errorf("ran in image %q, want python (the image with the programs)", res.Image)
		}
	})

	t.Run("the audit says why", func(t *testing.T) {
		dir := t.TempDir()
		cfg := filepath.Join(dir, "audit.hcl")
		runItWriteFile(t, cfg, fmt.Sprintf("daemon {\n  audit_dir = %q\n}\n", filepath.Join(dir, "audit")))
		o := runItExec(t, "run", "--config", cfg, "--runtime", "runsc", "--root", root, "docs25", "scripts/pdfversion.sh")
		if o.code != 0 || !strings.Contains(o.stdout, "pdfinfo version") {
			t.Fatalf("pdfinfo -v:\n%s", o)
		}
		var rule string
		for _, r := range readAuditRecords(t, filepath.Join(dir, "audit")) {
			if r.Event == audit.EventRunStart {
				rule = r.Detail["interpreter_rule"]
			}
		}
		for _, want := range []string{`image "python"`, `chosen over image "shell"`, "starts pdfinfo", `image "shell" lacks`} {
			if !strings.Contains(rule, want) {
				t.Errorf("interpreter_rule %q lacks %q", rule, want)
			}
		}
	})

	t.Run("skills check names a missing program", func(t *testing.T) {
		o := runItExec(t, "skills", "check", "--root", root, "--images", itImages, "--json", "docs25")
		if o.code != 1 {
			t.Fatalf("skills check: want exit 1 (a program is missing)\n%s", o)
		}
		var res struct {
			Findings []struct {
				File, Kind, Name, State, Hint string
				Line                          int
			}
			Missing int
		}
		if err := json.Unmarshal([]byte(o.stdout), &res); err != nil {
			t.Fatalf("%v\n%s", err, o)
		}
		got := map[string]string{}
		for _, f := range res.Findings {
			if f.Kind == "program" {
				got[fmt.Sprintf("%s:%d %s", f.File, f.Line, f.Name)] = f.State
			}
			if f.Name == "nosuchprog25" && !strings.Contains(f.Hint, "images/recipes/") {
				t.Errorf("the hint does not say how to provide it: %q", f.Hint)
			}
		}
		for k, want := range map[string]string{
			"scripts/missing.sh:2 nosuchprog25": "missing",
			"scripts/missing.sh:1 jq":           "satisfied",
			"scripts/pdf.sh:3 pdfinfo":          "satisfied", // in python, where the script runs
			"scripts/pdf.sh:4 qpdf":             "satisfied",
			"scripts/pdf.sh:6 soffice":          "satisfied",
		} {
			if got[k] != want {
				t.Errorf("%s: %q, want %q (programs: %v)", k, got[k], want, got)
			}
		}
		if res.Missing != 1 {
			t.Errorf("missing %d, want 1:\n%s", res.Missing, o)
		}
	})
}

// TestSkillSnapshotModesRootless: without root the sandbox's uid 0 is the
// user who owns the snapshot, so the owner's write bits it now keeps would
// let it write, were it not for the read-only mount: it must refuse every
// change, and the user's snapshot directory stays 0700.
func TestSkillSnapshotModesRootless(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "python")
	h := newRootlessHome(t)
	code := `import os, shutil
shutil.copy('/skill/scripts/hi.sh', 'hi.sh')
open('hi.sh', 'a').write('echo edited\n')
print('copy edited')
p = '/skill/scripts/py.py'
st = os.stat(p)
print('uid', os.getuid(), 'owner', st.st_uid, 'mode', oct(st.st_mode & 0o777))
for name, fn in [('append', lambda: open(p, 'a').write('x')), ('chmod', lambda: os.chmod(p, 0o777)),
                 ('unlink', lambda: os.unlink(p)), ('create', lambda: open('/skill/new', 'w')),
                 ('utime', lambda: os.utime(p, (0, 0))), ('rename', lambda: os.rename(p, p + '.x'))]:
    try:
        fn()
        print('WRITABLE', name)
    except OSError as e:
        print('refused', name, e.errno)
`
	o := h.run(t, "run", "--config", h.cfg, "--root", h.root, "probe", "scripts/py.py", "--", code)
	if o.code != 0 || !strings.Contains(o.stdout, "copy edited") || !strings.Contains(o.stdout, "mode 0o644") {
		t.Fatalf("rootless template copy:\n%s", o)
	}
	if strings.Contains(o.stdout, "WRITABLE") || strings.Count(o.stdout, "refused") != 6 {
		t.Errorf("the skill is writable in a rootless sandbox:\n%s", o)
	}
	var snaps []string
	filepath.WalkDir(h.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "snapshots" {
			snaps = append(snaps, p)
			return filepath.SkipDir
		}
		return nil
	})
	if len(snaps) != 1 {
		t.Fatalf("want the user's one snapshots directory under %s, found %v", h.dir, snaps)
	}
	if st, err := os.Lstat(snaps[0]); err != nil || st.Mode().Perm() != 0o700 || st.Sys().(*syscall.Stat_t).Uid != rootlessUID {
		t.Errorf("%s: %v %v, want uid %d's 0700", snaps[0], st.Mode(), err, rootlessUID)
	}
}

// TestDaemonWarmShellScriptInPythonImage: through the socket with a warm
// pool, a .sh that calls pdfinfo is warmed in, and runs warm in, the
// python image, beside the skill's python script (another boot mode).
func TestDaemonWarmShellScriptInPythonImage(t *testing.T) {
	needDaemon(t)
	runItNeedImage(t, "python")
	runItNeedImage(t, "shell")
	root := extraSkill(t, "docs25warm", "scripts/v.sh", "pdfinfo -v 2>&1 | head -n 1\n")
	runItWriteFile(t, filepath.Join(root, "docs25warm", "scripts", "p.py"), "print('py')\n")
	d := newItDaemonPool(t, 1, root)
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"docs25warm"}}))
	d.waitWarm(t, 2) // python with a preloaded interpreter, python for exec
	var warm bool
	for i := 0; i < 10 && !warm; i++ {
		d.waitWarm(t, 2)
		time.Sleep(500 * time.Millisecond)
		res := must[*api.RunScriptResult](t, "run_script")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/v.sh"}))
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, "pdfinfo version") || res.Image != "python" {
			t.Fatalf("v.sh: exit %d image %q\n%s%s", res.ExitCode, res.Image, res.Stdout, res.Stderr)
		}
		warm = res.Warm
	}
	if !warm {
		t.Errorf("no run of the moved .sh went warm in ten")
	}
	res := must[*api.RunScriptResult](t, "run_script")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/p.py"}))
	if res.ExitCode != 0 || res.Stdout != "py\n" {
		t.Errorf("p.py beside it: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}
