//go:build integration

package main

import (
	"archive/zip"
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
)

// bigWheel is a wheel of module mod whose files (name → size) are made of
// one repeated byte: it compresses to almost nothing. Python files hold
// one string literal, so that compiling them doubles what they take.
func bigWheel(t *testing.T, dist, version, mod string, files map[string]int) (string, []byte) {
	t.Helper()
	file := fmt.Sprintf("%s-%s-py3-none-any.whl", dist, version)
	info := fmt.Sprintf("%s-%s.dist-info", dist, version)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, size := range files {
		w, err := zw.Create(mod + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("X = \""))
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		for n := 0; n < size; n += len(chunk) {
			w.Write(chunk[:min(len(chunk), size-n)])
		}
		w.Write([]byte("\"\n"))
	}
	for name, body := range map[string]string{
		"METADATA": fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", dist, version),
		"WHEEL":    "Wheel-Version: 1.0\nGenerator: skillbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"RECORD":   "",
	} {
		w, err := zw.Create(info + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return file, buf.Bytes()
}

// procKB reads a "Name:   N kB" line of /proc/pid/status.
func procKB(t *testing.T, pid int, name string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return 0
}

// A small wheel that unpacks to 256 MiB fails its
// layer build against a 48 MiB cap with an error naming both sizes,
// audited, while the daemon's memory stays near its baseline; a wheel
// whose declared size fits but whose install outgrows the cap (compiled
// files) is stopped by the install sandbox's bounded tmpfs.
func TestDepsLayerCap(t *testing.T) {
	needDaemon(t)
	runItNeedImage(t, "python-slim")
	needPip(t)
	ver := runVersion()

	ix := &pyIndex{files: map[string][]byte{}, projects: map[string][]string{}}
	bombFile, bombData := bigWheel(t, "bombdep", ver, "bombdep", map[string]int{"__init__.py": 256 << 20})
	if len(bombData) > 2<<20 {
		t.Fatalf("the bomb wheel is %d bytes, meant to be small", len(bombData))
	}
	ix.add("bombdep", bombFile, bombData)
	growFile, growData := bigWheel(t, "growdep", ver, "growdep", map[string]int{"__init__.py": 14 << 20, "b.py": 14 << 20, "c.py": 14 << 20})
	ix.add("growdep", growFile, growData)
	srv := httptest.NewServer(ix) // loopback
	t.Cleanup(srv.Close)

	root := lifecycleRoot(t)
	writeFiles(t, root, map[string]string{
		"bomb-skill/SKILL.md":         "---\nname: bomb-skill\ndescription: Declares a package that unpacks hugely.\n---\nBody.\n",
		"bomb-skill/requirements.txt": "bombdep==" + ver + "\n",
		"bomb-skill/scripts/use.py":   "import bombdep\n",
		"grow-skill/SKILL.md":         "---\nname: grow-skill\ndescription: Declares a package whose install outgrows the cap.\n---\nBody.\n",
		"grow-skill/requirements.txt": "growdep==" + ver + "\n",
		"grow-skill/scripts/use.py":   "import growdep\n",
	})
	d := newItDaemon(t, root)
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg = append(cfg, fmt.Sprintf(`image "python" { recipe = "python-slim" }
python_index { url = "%s/simple/" }
dependencies { max_layer_bytes = "48MiB" }
`, srv.URL)...)
	if err := os.WriteFile(d.cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	c := d.client()
	ctx := ctxT(t)
	pid := d.cmd.Process.Pid
	// Settle, then take the baseline.
	must[string](t, "sessions.create")(c.NewSession(ctx))
	time.Sleep(time.Second)
	baseline := procKB(t, pid, "VmRSS")

	for _, tc := range []struct {
		skill string
		says  []string
	}{
		{"bomb-skill", []string{"over the cap of 48.0 MiB", "256.0 MiB", bombFile, "max_layer_bytes"}},
		{"grow-skill", []string{"grew past the cap of 48.0 MiB", "while unpacking", "max_layer_bytes"}},
	} {
		t.Run(tc.skill, func(t *testing.T) {
			sid := must[string](t, "sessions.create")(c.NewSession(ctx))
			must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{tc.skill}}))
			_, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/use.py"})
			e := wantKind(t, "a run of a skill whose layer is over the cap", err, api.KindUnavailable)
			for _, w := range tc.says {
				if !strings.Contains(e.Message, w) {
					t.Errorf("the error does not name %q: %s", w, e.Message)
				}
			}
			found := false
			for _, r := range d.records() {
				if r.Event == "deps.build" && r.Skill != nil && r.Skill.Name == tc.skill && r.Outcome == "refused" && strings.Contains(r.Error, "max_layer_bytes") {
					found = true
				}
			}
			if !found {
				t.Errorf("no refused deps.build audit record for %s", tc.skill)
			}
		})
	}
	peak := procKB(t, pid, "VmHWM")
	t.Logf("daemon RSS: baseline %d kB, peak %d kB", baseline, peak)
	if peak-baseline > 100<<10 {
		t.Errorf("daemon peak RSS %d kB is more than 100 MiB above its baseline %d kB", peak, baseline)
	}
}
