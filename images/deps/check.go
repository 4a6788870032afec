package deps

import (
	"bufio"
	"bytes"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A static check of a skill against its image and dependency layer: which
// Python imports and Node requires will not resolve, and which programs
// the scripts start (literal names in subprocess / os.system /
// child_process calls, #! lines) the image lacks. It reads files only;
// nothing of the skill runs. It is a best effort over literal names: code
// that builds a module or program name at run time is not seen.

// Finding kinds and states.
const (
	KindImport  = "import"
	KindProgram = "program"

	StateMissing   = "missing"
	StateSatisfied = "satisfied"
)

// Finding is one import or program of one script line.
type Finding struct {
	File string `json:"file"` // relative to the skill root
	Line int    `json:"line"`
	Kind string `json:"kind"` // KindImport or KindProgram
	Name string `json:"name"` // module or program name
	// State is StateMissing or StateSatisfied; By says what satisfies it:
	// "stdlib", "builtin", "image", "layer", "skill", "declared".
	State string `json:"state"`
	By    string `json:"by,omitempty"`
	// Hint says how to provide a missing one.
	Hint string `json:"hint,omitempty"`
}

// CheckInput is what a check looks at besides the skill's files.
type CheckInput struct {
	// Images by script family ("python", "node", "shell"): the image each
	// family of script runs in. A family without an image is not checked.
	Images map[string]*Image
	// Layers by family: the built dependency layer's tree dir, if any.
	Layers map[string]string
	// Declared is what the skill declares (its layer may not be built yet).
	Declared *Set
	// Extras are image extras by family that are not installed (recipe
	// names), for hints.
	Extras map[string][]string
	// ImageFor, when set, may name another image for one script than its
	// family's (a shell script moved by the programs it starts); nil keeps
	// the family's.
	ImageFor func(rel string, data []byte) *Image
}

var (
	pyImportRE   = regexp.MustCompile(`^\s*import\s+([A-Za-z_][A-Za-z0-9_.]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_.]*)*)`)
	pyFromRE     = regexp.MustCompile(`^\s*from\s+([A-Za-z_][A-Za-z0-9_.]*)\s+import\b`)
	pyProgRE     = regexp.MustCompile(`\b(?:subprocess\.(?:run|call|check_call|check_output|Popen)|os\.system|os\.popen|shutil\.which)\(\s*\[?\s*(?:r|b)?["']([A-Za-z0-9_.+-]+)`)
	jsRequireRE  = regexp.MustCompile(`\brequire\(\s*["']([^"'./][^"']*)["']\s*\)|^\s*import\s+(?:[^"';]+\s+from\s+)?["']([^"'./][^"']*)["']|\bimport\(\s*["']([^"'./][^"']*)["']\s*\)`)
	jsProgRE     = regexp.MustCompile(`\b(?:exec|execSync|execFile|execFileSync|spawn|spawnSync)\(\s*["'\x60]([A-Za-z0-9_.+-]+)`)
	shebangEnvRE = regexp.MustCompile(`^#!\s*/usr/bin/env\s+(?:-S\s+)?([A-Za-z0-9_.+-]+)`)
	shebangRE    = regexp.MustCompile(`^#!\s*(/[^\s]+)`)
)

// binDirs are the PATH directories of the images (runtime.ContainerEnv).
var binDirs = []string{"usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin"}

// Check scans the skill's scripts (every .py, .js/.mjs/.cjs and .sh file
// and files with a #! line, at most maxScanFiles) and reports each import
// and program it names. unchecked are the families of scripts found whose
// image in is nil.
func Check(root string, in CheckInput) (out []Finding, unchecked []string, err error) {
	skipped := map[string]bool{}
	err = walkFiles(root, "", func(rel string, data []byte) error {
		fam := familyOf(rel, data)
		if fam == "" {
			return nil
		}
		if in.Images[fam] == nil {
			skipped[fam] = true
			return nil
		}
		out = append(out, checkFile(root, rel, fam, data, in)...)
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Line < out[j].Line
	})
	for f := range skipped {
		unchecked = append(unchecked, f)
	}
	sort.Strings(unchecked)
	return out, unchecked, err
}

// familyOf is the script family of a file by extension, else by #! line.
func familyOf(rel string, data []byte) string {
	switch path.Ext(rel) {
	case ".py":
		return "python"
	case ".js", ".mjs", ".cjs":
		return "node"
	case ".sh", ".bash":
		return "shell"
	}
	if !bytes.HasPrefix(data, []byte("#!")) {
		return ""
	}
	first, _, _ := bytes.Cut(data, []byte("\n"))
	switch {
	case bytes.Contains(first, []byte("python")):
		return "python"
	case bytes.Contains(first, []byte("node")):
		return "node"
	default:
		return "shell"
	}
}

func checkFile(root, rel, fam string, data []byte, in CheckInput) []Finding {
	im := in.Images[fam]
	if im == nil {
		return nil
	}
	if in.ImageFor != nil {
		if alt := in.ImageFor(rel, data); alt != nil {
			im = alt
		}
	}
	var out []Finding
	seen := map[string]bool{}
	add := func(f Finding) {
		k := f.Kind + "\x00" + f.Name
		if seen[k] {
			return
		}
		seen[k] = true
		out = append(out, f)
	}
	scanFile(fam, data, func(line int, kind, name string) {
		switch {
		case kind == KindProgram:
			add(checkProgram(rel, line, name, im))
		case fam == "python":
			add(checkPythonModule(root, rel, line, name, im, in))
		default:
			add(checkNodeModule(rel, line, name, im, in))
		}
	})
	if fam == "shell" {
		for _, c := range ShellCalls(data) {
			f := checkProgram(rel, c.Line, c.Name, im)
			if f.State == StateMissing {
				f.Hint = "no built image has " + c.Name + " together with the shell and the script's other programs (a shell script runs in another image only if that one has them all): add the Debian package that provides it to the recipe of the script's image (images/recipes/) and rebuild it, or do without it"
			}
			add(f)
		}
	}
	return out
}

// scanFile calls fn with every import (a Python module's top-level name,
// a Node module specifier) and program a script of family fam names, with
// its line; the one reading of scripts that Check and Imports share.
func scanFile(fam string, data []byte, fn func(line int, kind, name string)) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxScriptScan)
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		if line == 1 {
			if m := shebangEnvRE.FindStringSubmatch(l); m != nil {
				fn(line, KindProgram, m[1])
			} else if m := shebangRE.FindStringSubmatch(l); m != nil {
				fn(line, KindProgram, m[1])
			}
		}
		switch fam {
		case "python":
			if strings.HasPrefix(strings.TrimSpace(l), "#") {
				continue
			}
			var mods []string
			if m := pyImportRE.FindStringSubmatch(l); m != nil {
				for _, s := range strings.Split(m[1], ",") {
					mods = append(mods, strings.TrimSpace(s))
				}
			} else if m := pyFromRE.FindStringSubmatch(l); m != nil {
				mods = append(mods, m[1])
			}
			for _, mod := range mods {
				top, _, _ := strings.Cut(mod, ".")
				fn(line, KindImport, top)
			}
			for _, m := range pyProgRE.FindAllStringSubmatch(l, -1) {
				fn(line, KindProgram, m[1])
			}
		case "node":
			for _, m := range jsRequireRE.FindAllStringSubmatch(l, -1) {
				fn(line, KindImport, m[1]+m[2]+m[3])
			}
			for _, m := range jsProgRE.FindAllStringSubmatch(l, -1) {
				fn(line, KindProgram, m[1])
			}
		}
	}
}

func checkProgram(rel string, line int, name string, im *Image) Finding {
	f := Finding{File: rel, Line: line, Kind: KindProgram, Name: name}
	if strings.HasPrefix(name, "/") {
		if _, err := os.Lstat(filepath.Join(im.Root, filepath.Clean(name))); err == nil {
			f.State, f.By = StateSatisfied, "image"
			return f
		}
	} else {
		for _, d := range binDirs {
			if _, err := os.Lstat(filepath.Join(im.Root, d, name)); err == nil {
				f.State, f.By = StateSatisfied, "image"
				return f
			}
		}
	}
	f.State = StateMissing
	f.Hint = "the image has no program " + name + ": use an image whose recipe installs it (config image blocks), or do without it"
	return f
}

// pyBuiltins are modules compiled into CPython (no file in the image).
var pyBuiltins = map[string]bool{
	"sys": true, "builtins": true, "marshal": true, "posix": true, "time": true, "errno": true, "gc": true,
	"itertools": true, "_io": true, "_thread": true, "_weakref": true, "_abc": true, "_codecs": true,
	"_collections": true, "_functools": true, "_operator": true, "_signal": true, "_sre": true, "_stat": true,
	"_string": true, "_symtable": true, "_tracemalloc": true, "_warnings": true, "atexit": true, "pwd": true,
	"faulthandler": true, "_imp": true, "_locale": true, "xxsubtype": true, "__future__": false,
}

func checkPythonModule(root, rel string, line int, mod string, im *Image, in CheckInput) Finding {
	f := Finding{File: rel, Line: line, Kind: KindImport, Name: mod}
	sat := func(by string) Finding { f.State, f.By = StateSatisfied, by; return f }
	if pyBuiltins[mod] {
		return sat("builtin")
	}
	// The skill's own modules: the skill root and the script's directory
	// are on the module path.
	for _, d := range []string{root, filepath.Join(root, filepath.FromSlash(path.Dir(rel)))} {
		if pyModuleIn(d, mod) {
			return sat("skill")
		}
	}
	if im.PythonVersion != "" {
		std := filepath.Join(im.Root, "usr/lib/python"+im.PythonVersion)
		if pyModuleIn(std, mod) || pyModuleIn(filepath.Join(std, "lib-dynload"), mod) {
			return sat("stdlib")
		}
		for _, d := range im.PythonPaths() {
			if pyModuleIn(filepath.Join(im.Root, d), mod) {
				return sat("image")
			}
		}
	}
	if l := in.Layers["python"]; l != "" && pyModuleIn(filepath.Join(l, PythonDir), mod) {
		return sat("layer")
	}
	if in.Declared != nil {
		for _, r := range in.Declared.Python {
			if ModuleOf(r.Name) == mod {
				f.State, f.By = StateSatisfied, "declared"
				f.Hint = "declared (" + r.Source + "); its layer is built on load or by skillbox deps build"
				return f
			}
		}
	}
	f.State = StateMissing
	for _, e := range in.Extras["python"] {
		if ModuleOf(e) == mod {
			f.Hint = "image extra " + e + " is not installed: configure python_index { url = … } and rebuild the image"
			return f
		}
	}
	f.Hint = "declare its package in requirements.txt or a PEP 723 block (dependencies = [\"" + DistOf(mod) + "\"]) and configure python_index"
	return f
}

// pyModuleIn reports whether dir holds module mod (a package, a .py file
// or an extension module).
func pyModuleIn(dir, mod string) bool {
	if _, err := os.Stat(filepath.Join(dir, mod)); err == nil {
		return true
	}
	if _, err := os.Stat(filepath.Join(dir, mod+".py")); err == nil {
		return true
	}
	if ms, _ := filepath.Glob(filepath.Join(dir, mod+".*.so")); len(ms) > 0 {
		return true
	}
	_, err := os.Stat(filepath.Join(dir, mod+".so"))
	return err == nil
}

// nodeBuiltins are Node's core modules.
var nodeBuiltins = map[string]bool{}

func init() {
	for _, m := range strings.Fields(`assert async_hooks buffer child_process cluster console constants crypto dgram
		diagnostics_channel dns domain events fs http http2 https inspector module net os path perf_hooks process
		punycode querystring readline repl stream string_decoder sys timers tls trace_events tty url util v8 vm
		wasi worker_threads zlib test sqlite`) {
		nodeBuiltins[m] = true
	}
}

func checkNodeModule(rel string, line int, name string, im *Image, in CheckInput) Finding {
	f := Finding{File: rel, Line: line, Kind: KindImport, Name: name}
	if strings.HasPrefix(name, "node:") {
		f.State, f.By = StateSatisfied, "builtin"
		return f
	}
	pkg := nodePackage(name)
	f.Name = pkg
	sat := func(by string) Finding { f.State, f.By = StateSatisfied, by; return f }
	if nodeBuiltins[pkg] {
		return sat("builtin")
	}
	if _, ok := im.NodeModules[pkg]; ok {
		return sat("image")
	}
	if l := in.Layers["node"]; l != "" {
		if _, err := os.Stat(filepath.Join(l, NodeDir, pkg, "package.json")); err == nil {
			return sat("layer")
		}
	}
	if in.Declared != nil {
		for _, d := range in.Declared.Npm {
			if d.Name == pkg {
				f.State, f.By = StateSatisfied, "declared"
				f.Hint = "declared (" + d.Source + "); its layer is built on load or by skillbox deps build"
				return f
			}
		}
	}
	f.State = StateMissing
	f.Hint = "declare it in the skill's package.json dependencies and configure npm_registry"
	return f
}

// nodePackage is the package a module specifier names ("@a/b/c" → "@a/b",
// "lodash/fp" → "lodash").
func nodePackage(name string) string {
	parts := strings.Split(name, "/")
	if strings.HasPrefix(name, "@") && len(parts) > 1 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}
