//go:build integration

package main

// Dependency layers end to end: the real binary, a real pip on the host
// against a PEP 503 simple index the test serves on loopback (over wheels
// it builds from its own tiny sources, and one package that only has a
// source distribution), real installs in an offline runsc sandbox of the
// python-slim image, and runs that import what the layer holds.

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// pyIndex is a PEP 503 simple index over files kept in memory.
type pyIndex struct {
	files    map[string][]byte   // file name → bytes
	projects map[string][]string // normalised name → file names
	fetches  atomic.Int64        // artifact downloads
}

func (ix *pyIndex) add(project, file string, data []byte) {
	ix.files[file] = data
	ix.projects[project] = append(ix.projects[project], file)
}

func (ix *pyIndex) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/simple/":
		names := make([]string, 0, len(ix.projects))
		for n := range ix.projects {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprint(w, "<!DOCTYPE html><html><body>\n")
		for _, n := range names {
			fmt.Fprintf(w, "<a href=\"/simple/%s/\">%s</a>\n", n, n)
		}
		fmt.Fprint(w, "</body></html>\n")
	case strings.HasPrefix(r.URL.Path, "/simple/"):
		n := strings.Trim(strings.TrimPrefix(r.URL.Path, "/simple/"), "/")
		files, ok := ix.projects[n]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "<!DOCTYPE html><html><body>\n")
		for _, f := range files {
			sum := sha256.Sum256(ix.files[f])
			fmt.Fprintf(w, "<a href=\"/files/%s#sha256=%s\">%s</a>\n", f, hex.EncodeToString(sum[:]), f)
		}
		fmt.Fprint(w, "</body></html>\n")
	case strings.HasPrefix(r.URL.Path, "/files/"):
		data, ok := ix.files[strings.TrimPrefix(r.URL.Path, "/files/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		ix.fetches.Add(1)
		w.Write(data)
	default:
		http.NotFound(w, r)
	}
}

// testWheel builds a pure-Python wheel of module mod (one __init__.py with
// src) as a build backend would: dist-info with METADATA, WHEEL and RECORD.
func testWheel(t *testing.T, dist, version, mod, src string) (string, []byte) {
	t.Helper()
	file := fmt.Sprintf("%s-%s-py3-none-any.whl", dist, version)
	info := fmt.Sprintf("%s-%s.dist-info", dist, version)
	entries := []struct{ name, body string }{
		{mod + "/__init__.py", src},
		{info + "/METADATA", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: skillbox test package\n", dist, version)},
		{info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: skillbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, e := range entries {
		w, err := zw.Create(e.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(e.body))
		sum := sha256.Sum256([]byte(e.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", e.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(e.body))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", info)
	w, err := zw.Create(info + "/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return file, buf.Bytes()
}

// testSdist is a source distribution (a tar.gz with a setup.py that would
// run code if anything built it).
func testSdist(t *testing.T, dist, version string) (string, []byte) {
	t.Helper()
	file := fmt.Sprintf("%s-%s.tar.gz", dist, version)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	body := "raise SystemExit('building this package runs its code')\n"
	tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("%s-%s/setup.py", dist, version), Mode: 0o644, Size: int64(len(body))})
	tw.Write([]byte(body))
	tw.Close()
	gz.Close()
	return file, buf.Bytes()
}

// depsLayerOut is `skillbox deps build --json`'s element.
type depsLayerOut struct {
	Digest    string `json:"digest"`
	Dir       string `json:"dir"`
	Built     string `json:"built"`
	Artifacts []struct {
		Name   string `json:"name"`
		File   string `json:"file"`
		SHA256 string `json:"sha256"`
	} `json:"artifacts"`
}

func layerEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// needPip skips the test if the host has no pip, which builds the test
// index's wheels.
func needPip(t *testing.T) {
	t.Helper()
	if err := exec.Command("python3", "-m", "pip", "--version").Run(); err != nil {
		t.Skipf("the host has no pip (python3 -m pip): %v", err)
	}
}

// runVersion is a package version unique to this run, so that no layer of
// an earlier run is reused.
func runVersion() string {
	var rnd [4]byte
	rand.Read(rnd[:])
	return fmt.Sprintf("1.0.%d", uint32(rnd[0])<<16|uint32(rnd[1])<<8|uint32(rnd[2]))
}

func TestDepsLayers(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "python-slim")
	needPip(t)
	ver := runVersion()

	ix := &pyIndex{files: map[string][]byte{}, projects: map[string][]string{}}
	tinyFile, tinyWheel := testWheel(t, "tinydep", ver, "tinydep", "VALUE = 'tinydep-"+ver+"'\n")
	ix.add("tinydep", tinyFile, tinyWheel)
	pepFile, pepWheel := testWheel(t, "pepdep", ver, "pepdep", "def hello():\n    return 'pepdep says hi'\n")
	ix.add("pepdep", pepFile, pepWheel)
	sdFile, sdData := testSdist(t, "srconly", ver)
	ix.add("srconly", sdFile, sdData)
	srv := httptest.NewServer(ix) // loopback
	t.Cleanup(srv.Close)
	tinySum := sha256.Sum256(tinyWheel)

	f := newRunFixture(t)
	audDir := filepath.Join(f.base, "audit")
	writeSkill := func(name string, files map[string]string) {
		files["SKILL.md"] = fmt.Sprintf("---\nname: %s\ndescription: Dependency layer test skill. Use only in tests.\n---\n# %s\n", name, name)
		for p, s := range files {
			runItWriteFile(t, filepath.Join(f.root, name, p), s)
		}
	}
	writeSkill("req-skill", map[string]string{
		"requirements.txt": "# what the script imports\ntinydep==" + ver + "\n",
		"scripts/use.py":   "import tinydep\nprint('got', tinydep.VALUE)\n",
		"scripts/check_me.py": "import json\nimport tinydep\nimport nosuchmod_xyz\nimport subprocess\n" +
			"subprocess.run(['no-such-program-xyz'])\nsubprocess.run(['sh', '-c', 'true'])\n",
	})
	writeSkill("pep-skill", map[string]string{
		"scripts/pep.py": "# /// script\n# requires-python = \">=3.9\"\n# dependencies = [\n#   \"pepdep==" + ver + "\",\n# ]\n# ///\nimport pepdep\nprint(pepdep.hello())\n",
	})
	loadFile, loadWheel := testWheel(t, "loaddep", ver, "loaddep", "WHO = 'loaddep'\n")
	ix.add("loaddep", loadFile, loadWheel)
	writeSkill("load-skill", map[string]string{
		"scripts/requirements.txt": "loaddep==" + ver + "\n",
		"scripts/who.py":           "import loaddep\nprint('who', loaddep.WHO)\n",
	})
	writeSkill("plain-skill", map[string]string{"scripts/hello.py": "print('hello')\n"})
	writeSkill("src-skill", map[string]string{
		"requirements.txt": "srconly==" + ver + "\n",
		"scripts/use.py":   "import srconly\n",
	})
	writeSkill("hash-skill", map[string]string{
		"requirements.txt": "tinydep==" + ver + " --hash=sha256:" + strings.Repeat("0", 64) + "\n",
		"scripts/use.py":   "import tinydep\n",
	})
	for _, p := range []string{f.root, filepath.Join(f.base)} {
		filepath.WalkDir(p, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			} else if err == nil {
				os.Chmod(p, 0o644)
			}
			return nil
		})
	}
	cfg := filepath.Join(f.base, "skillbox.hcl")
	runItWriteFile(t, cfg, fmt.Sprintf(`
daemon { audit_dir = %q }
image "python" { recipe = "python-slim" }
python_index { url = "%s/simple/" }
`, audDir, srv.URL))
	noSrc := filepath.Join(f.base, "nosource.hcl")
	runItWriteFile(t, noSrc, "image \"python\" { recipe = \"python-slim\" }\n")

	layersDir := filepath.Join(itImages, "layers")
	var made []string
	t.Cleanup(func() {
		for _, d := range made {
			os.RemoveAll(filepath.Join(layersDir, "sha256-"+strings.TrimPrefix(d, "sha256:")))
		}
	})

	build := func(skill string) ([]depsLayerOut, runOut) {
		o := runItExec(t, "deps", "build", "--config", cfg, "--root", f.root, "--images", itImages, "--json", skill)
		if o.code != 0 {
			return nil, o
		}
		var ls []depsLayerOut
		if err := json.Unmarshal([]byte(o.stdout), &ls); err != nil {
			t.Fatalf("deps build %s --json: %v\n%s", skill, err, o)
		}
		for _, l := range ls {
			made = append(made, l.Digest)
		}
		return ls, o
	}

	t.Run("no source names the missing package", func(t *testing.T) {
		o := runItExec(t, "run", "--config", noSrc, "--root", f.root, "req-skill", "scripts/use.py")
		t.Log(o.stderr)
		runItWantError(t, "run without a source", o, 1, "tinydep=="+ver, "requirements.txt", "python_index")
	})

	var first depsLayerOut
	t.Run("requirements.txt builds a layer that runs import", func(t *testing.T) {
		ls, o := build("req-skill")
		if ls == nil {
			t.Fatalf("deps build req-skill failed\n%s", o)
		}
		if len(ls) != 1 || len(ls[0].Artifacts) != 1 {
			t.Fatalf("want one layer with one artifact, got %+v", ls)
		}
		first = ls[0]
		if a := first.Artifacts[0]; a.File != tinyFile || a.SHA256 != hex.EncodeToString(tinySum[:]) {
			t.Errorf("manifest artifact %+v, want %s with sha256 %x", a, tinyFile, tinySum)
		}
		r := runItExec(t, "run", "--config", cfg, "--root", f.root, "--json", "req-skill", "scripts/use.py")
		if r.code != 0 {
			t.Fatalf("run req-skill\n%s", r)
		}
		var res struct {
			Stdout    string `json:"stdout"`
			DepsLayer string `json:"deps_layer"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("%v\n%s", err, r)
		}
		if !strings.Contains(res.Stdout, "got tinydep-"+ver) {
			t.Errorf("stdout %q does not show the import", res.Stdout)
		}
		if res.DepsLayer != first.Digest {
			t.Errorf("result deps_layer %q, want %q", res.DepsLayer, first.Digest)
		}
		// The audit records name the layer.
		found := false
		for _, rec := range runEnds(t, audDir) {
			if rec.Run != nil && rec.Run.DepsLayer == first.Digest {
				found = true
			}
		}
		if !found {
			t.Errorf("no run.end audit record names layer %s", first.Digest)
		}
	})

	t.Run("second build reuses the layer", func(t *testing.T) {
		if first.Digest == "" {
			t.Skip("the first build failed")
		}
		before := ix.fetches.Load()
		ls, o := build("req-skill")
		if ls == nil {
			t.Fatalf("second deps build failed\n%s", o)
		}
		if len(ls) != 1 || ls[0].Digest != first.Digest || ls[0].Built != first.Built {
			t.Errorf("second build gave %+v, want the same layer %s built at %s", ls, first.Digest, first.Built)
		}
		if n := ix.fetches.Load() - before; n != 0 {
			t.Errorf("second build fetched %d artifacts, want none", n)
		}
	})

	t.Run("skills check", func(t *testing.T) {
		if first.Digest == "" {
			t.Skip("the first build failed")
		}
		o := runItExec(t, "skills", "check", "--config", cfg, "--root", f.root, "--images", itImages, "--json", "req-skill")
		if o.code != 1 {
			t.Fatalf("skills check: want exit 1 (something is missing)\n%s", o)
		}
		var res struct {
			Findings []struct {
				File, Kind, Name, State, By string
				Line                        int
			}
			Missing int
		}
		if err := json.Unmarshal([]byte(o.stdout), &res); err != nil {
			t.Fatalf("%v\n%s", err, o)
		}
		got := map[string]string{}
		for _, f := range res.Findings {
			if f.File == "scripts/check_me.py" {
				got[fmt.Sprintf("%d %s %s", f.Line, f.Kind, f.Name)] = f.State + " " + f.By
			}
		}
		want := map[string]string{
			"1 import json":                 "satisfied stdlib",
			"2 import tinydep":              "satisfied layer",
			"3 import nosuchmod_xyz":        "missing ",
			"4 import subprocess":           "satisfied stdlib",
			"5 program no-such-program-xyz": "missing ",
			"6 program sh":                  "satisfied image",
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("scripts/check_me.py:%s: got %q, want %q", k, got[k], w)
			}
		}
		if res.Missing != 2 {
			t.Errorf("missing = %d, want 2\n%s", res.Missing, o.stdout)
		}
	})

	t.Run("PEP 723 block", func(t *testing.T) {
		// skillbox run builds the layer itself before the run (a load).
		r := runItExec(t, "run", "--config", cfg, "--root", f.root, "--json", "pep-skill", "scripts/pep.py")
		if r.code != 0 {
			t.Fatalf("run pep-skill\n%s", r)
		}
		var res struct {
			Stdout    string `json:"stdout"`
			DepsLayer string `json:"deps_layer"`
		}
		json.Unmarshal([]byte(r.stdout), &res)
		if !strings.Contains(res.Stdout, "pepdep says hi") || res.DepsLayer == "" {
			t.Errorf("run pep-skill: stdout %q, layer %q", res.Stdout, res.DepsLayer)
		}
		made = append(made, res.DepsLayer)
	})

	t.Run("daemon builds on load, run waits", func(t *testing.T) {
		depsDaemon(t, f, srv.URL, ver, &made)
	})

	t.Run("image extras", func(t *testing.T) {
		// A stand-in wheel under an extras name; a recipe like python-slim's
		// (same packages, so the built image is up to date) naming it.
		pptxFile, pptxWheel := testWheel(t, "python_pptx", ver, "pptx", "NAME = 'stand-in pptx "+ver+"'\n")
		ix.add("python-pptx", pptxFile, pptxWheel)
		recipes := filepath.Join(f.base, "recipes")
		slim, err := os.ReadFile(filepath.Join(itRepo, "images", "recipes", "python-slim.hcl"))
		if err != nil {
			t.Fatal(err)
		}
		recipe := strings.Replace(string(slim), "  interpreters = ", "  python_extras = [\"python-pptx=="+ver+"\"]\n  interpreters = ", 1)
		runItWriteFile(t, filepath.Join(recipes, "python-slim.hcl"), recipe)
		cfgX := filepath.Join(f.base, "extras.hcl")
		runItWriteFile(t, cfgX, fmt.Sprintf(`
images { recipes_dirs = [%q] }
image "python" { recipe = "python-slim" }
python_index { url = "%s/simple/" }
`, recipes, srv.URL))
		// Without a source the image builds and says what is missing.
		o := runItExec(t, "images", "build", "--dir", itImages, "--recipes", recipes, "--if-needed", "--config", noSrc, "python-slim")
		if o.code != 0 || !strings.Contains(o.stderr, "extras not installed") || !strings.Contains(o.stderr, "python-pptx=="+ver) {
			t.Fatalf("images build without a source\n%s", o)
		}
		o = runItExec(t, "images", "build", "--dir", itImages, "--recipes", recipes, "--if-needed", "--config", cfgX, "python-slim")
		if o.code != 0 {
			t.Fatalf("images build with extras\n%s", o)
		}
		var layer string
		for _, l := range strings.Split(o.stdout, "\n") {
			if fs := strings.Split(l, "\t"); len(fs) >= 3 && fs[1] == "extras" {
				layer = fs[2]
			}
		}
		if !strings.HasPrefix(layer, "sha256:") || !strings.Contains(o.stdout, "python-pptx=="+ver) {
			t.Fatalf("images build printed no extras layer\n%s", o)
		}
		made = append(made, layer)
		r := runItExec(t, "exec", "--config", cfgX, "--root", f.root, "--skill", "plain-skill", "--language", "python", "--json", "-c", "import pptx\nprint(pptx.NAME)\n")
		if r.code != 0 || !strings.Contains(r.stdout, "stand-in pptx "+ver) || !strings.Contains(r.stdout, layer) {
			t.Fatalf("run_code importing an extra (layer %s)\n%s", layer, r)
		}
	})

	// A refused or failed build leaves nothing in the store.
	for _, tc := range []struct {
		name, skill string
		want        []string
	}{
		{"sdist-only is refused by name", "src-skill", []string{"srconly", "source distribution"}},
		{"wrong hash fails and caches nothing", "hash-skill", []string{"tinydep", "hash"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := layerEntries(t, layersDir)
			ls, o := build(tc.skill)
			if ls != nil {
				t.Fatalf("deps build %s succeeded: %+v", tc.skill, ls)
			}
			t.Log(o.stderr)
			runItWantError(t, tc.name, o, 1, tc.want...)
			if after := layerEntries(t, layersDir); !slices.Equal(before, after) {
				t.Errorf("a failed build left %v (before %v)", after, before)
			}
		})
	}
}

// The daemon: skills.load reports what the skill declares and starts the
// build off the run path; a run right after the load waits for it (the
// default when_not_ready = "wait"); run_code mounts the same layer.
func depsDaemon(t *testing.T, f *runFixture, srvURL, ver string, made *[]string) {
	d := newItDaemonPool(t, 1, f.root)
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg = append(cfg, fmt.Sprintf("image \"python\" { recipe = \"python-slim\" }\npython_index { url = \"%s/simple/\" }\n", srvURL)...)
	if err := os.WriteFile(d.cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	c := d.client()
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	lr := must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"load-skill"}}))
	if len(lr.ActiveSkills) != 1 {
		t.Fatalf("load receipt: %+v", lr)
	}
	dep := lr.ActiveSkills[0].Dependencies
	if dep == nil || len(dep.Python) != 1 || dep.Python[0] != "loaddep=="+ver || dep.State != "building" {
		t.Fatalf("load receipt dependencies: %+v", dep)
	}
	res := must[*api.RunScriptResult](t, "run_script")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/who.py"}))
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "who loaddep") || res.DepsLayer == "" {
		t.Fatalf("run_script: %+v", res)
	}
	*made = append(*made, res.DepsLayer)
	// Once the layer is built the skill is warmed with it: a warm run
	// imports from the same layer. (A sandbox listed may still be
	// booting, and a run then goes cold: run until one went warm.)
	warm := false
	for i := 0; i < 10 && !warm; i++ {
		d.waitWarm(t, 1)
		time.Sleep(500 * time.Millisecond)
		again := must[*api.RunScriptResult](t, "run_script again")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid}, Path: "scripts/who.py"}))
		if again.ExitCode != 0 || !strings.Contains(again.Stdout, "who loaddep") || again.DepsLayer != res.DepsLayer {
			t.Fatalf("run_script %d (warm %v): %+v", i+2, again.Warm, again)
		}
		warm = again.Warm
	}
	if !warm {
		t.Errorf("no run of a skill with a layer went warm in ten tries")
	}
	code := must[*api.RunScriptResult](t, "run_code")(c.RunCode(ctx, api.Peer{}, api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid}, Language: "python", Code: "import loaddep\nprint('code', loaddep.WHO)\n"}))
	if code.ExitCode != 0 || !strings.Contains(code.Stdout, "code loaddep") || code.DepsLayer != res.DepsLayer {
		t.Errorf("run_code: %+v", code)
	}
	found := false
	for _, rec := range d.records() {
		if rec.Event == audit.EventRunEnd && rec.Run != nil && rec.Run.DepsLayer == res.DepsLayer {
			found = true
		}
	}
	if !found {
		t.Errorf("no run.end record of the daemon names layer %s", res.DepsLayer)
	}
}

// A Node skill's package.json dependency comes from the npm registry
// (reachable from these machines), resolved with scripts off, checked
// against the lock's integrity, unpacked offline; the script requires it.
// A dependency the image already has (Debian ships is-number) gets no
// layer.
func TestDepsNodeRegistry(t *testing.T) {
	runItNeed(t, "runsc")
	runItNeedImage(t, "node")
	const registry = "https://registry.npmjs.org"
	if err := exec.Command("npm", "--version").Run(); err != nil {
		t.Skipf("the host has no npm: %v", err)
	}
	if resp, err := http.Get(registry + "/is-odd"); err != nil {
		t.Skipf("the npm registry is not reachable from here: %v", err)
	} else {
		resp.Body.Close()
	}
	f := newRunFixture(t)
	skill := func(name, dep, script string) {
		runItWriteFile(t, filepath.Join(f.root, name, "SKILL.md"), "---\nname: "+name+"\ndescription: Node dependency test skill. Use only in tests.\n---\n# "+name+"\n")
		runItWriteFile(t, filepath.Join(f.root, name, "package.json"), `{"name": "`+name+`", "private": true, "dependencies": {`+dep+`}}`)
		runItWriteFile(t, filepath.Join(f.root, name, "scripts", "check.js"), script)
		os.Chmod(filepath.Join(f.root, name, "scripts"), 0o755)
	}
	skill("node-deps", `"is-odd": "3.0.1"`, "const isOdd = require('is-odd');\nconsole.log('is-odd(3) =', isOdd(3));\n")
	skill("node-image", `"is-number": "^7.0.0"`, "console.log(require('is-number')(5));\n")
	cfg := filepath.Join(f.base, "skillbox.hcl")
	runItWriteFile(t, cfg, fmt.Sprintf("npm_registry { url = %q }\n", registry))

	build := func(name string) []depsLayerOut {
		o := runItExec(t, "deps", "build", "--config", cfg, "--root", f.root, "--images", itImages, "--json", name)
		if o.code != 0 {
			t.Fatalf("deps build %s\n%s", name, o)
		}
		var ls []depsLayerOut
		if err := json.Unmarshal([]byte(o.stdout), &ls); err != nil {
			t.Fatalf("deps build --json: %v\n%s", err, o)
		}
		for _, l := range ls {
			t.Cleanup(func() {
				os.RemoveAll(filepath.Join(itImages, "layers", "sha256-"+strings.TrimPrefix(l.Digest, "sha256:")))
			})
		}
		return ls
	}
	if ls := build("node-image"); len(ls) != 0 {
		t.Errorf("is-number is in the image, yet a layer was built: %+v", ls)
	}
	ls := build("node-deps")
	if len(ls) != 1 {
		t.Fatalf("want one layer, got %+v", ls)
	}
	names := map[string]bool{}
	for _, a := range ls[0].Artifacts {
		names[a.Name] = len(a.SHA256) == 64
	}
	if !names["is-odd"] {
		t.Errorf("manifest artifacts %+v lack is-odd with its sha256", ls[0].Artifacts)
	}
	r := runItExec(t, "run", "--config", cfg, "--root", f.root, "--json", "node-deps", "scripts/check.js")
	if r.code != 0 || !strings.Contains(r.stdout, "is-odd(3) = true") || !strings.Contains(r.stdout, ls[0].Digest) {
		t.Fatalf("run node-deps\n%s", r)
	}
}
