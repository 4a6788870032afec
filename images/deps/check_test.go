package deps

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, s := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheck(t *testing.T) {
	img := t.TempDir()
	writeTree(t, img, map[string]string{
		"usr/bin/python3.13":                                   "",
		"usr/bin/python3":                                      "",
		"usr/bin/qpdf":                                         "",
		"usr/bin/node":                                         "",
		"usr/lib/python3.13/json/__init__.py":                  "",
		"usr/lib/python3.13/subprocess.py":                     "",
		"usr/lib/python3.13/lib-dynload/_ssl.cpython-313.so":   "",
		"usr/lib/python3/dist-packages/yaml/__init__.py":       "",
		"usr/lib/python3/dist-packages/PyYAML-6.0.dist-info/x": "",
		"usr/share/nodejs/left-pad/package.json":               `{"version":"1.3.0"}`,
	})
	layer := t.TempDir()
	writeTree(t, layer, map[string]string{"python/tinydep/__init__.py": ""})
	skill := t.TempDir()
	writeTree(t, skill, map[string]string{
		"scripts/a.py": "#!/usr/bin/env python3\nimport json, yaml\nfrom tinydep import x\nimport helper\nimport nosuchmod.sub\n" +
			"import subprocess\nsubprocess.run([\"qpdf\", \"--version\"])\nsubprocess.run(['pdftoppm', '-v'])\nimport pptx\nimport declared_mod\n",
		"scripts/helper.py": "import _ssl\n",
		"scripts/b.js":      "const fs = require('fs');\nconst lp = require('left-pad');\nimport x from '@scope/thing/sub';\nconst { execSync } = require('child_process');\nexecSync('ffmpeg -i x');\n",
		"scripts/run.sh":    "#!/bin/bash\necho hi\n",
		"notes.txt":         "import missing\n",
	})
	im := Inspect(img)
	got, _, err := Check(skill, CheckInput{
		Images:   map[string]*Image{"python": im, "node": im, "shell": im},
		Layers:   map[string]string{"python": layer},
		Declared: &Set{Python: []Requirement{{Name: "declared-mod", Spec: "declared-mod", Source: "requirements.txt:1"}}},
		Extras:   map[string][]string{"python": {"python-pptx"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // file:line kind name → state by
		"scripts/a.py:1 program python3":      "satisfied image",
		"scripts/a.py:2 import json":          "satisfied stdlib",
		"scripts/a.py:2 import yaml":          "satisfied image",
		"scripts/a.py:3 import tinydep":       "satisfied layer",
		"scripts/a.py:4 import helper":        "satisfied skill",
		"scripts/a.py:5 import nosuchmod":     "missing ",
		"scripts/a.py:6 import subprocess":    "satisfied stdlib",
		"scripts/a.py:7 program qpdf":         "satisfied image",
		"scripts/a.py:8 program pdftoppm":     "missing ",
		"scripts/a.py:9 import pptx":          "missing ",
		"scripts/a.py:10 import declared_mod": "satisfied declared",
		"scripts/helper.py:1 import _ssl":     "satisfied stdlib",
		"scripts/b.js:1 import fs":            "satisfied builtin",
		"scripts/b.js:2 import left-pad":      "satisfied image",
		"scripts/b.js:3 import @scope/thing":  "missing ",
		"scripts/b.js:4 import child_process": "satisfied builtin",
		"scripts/b.js:5 program ffmpeg":       "missing ",
		"scripts/run.sh:1 program /bin/bash":  "missing ",
	}
	seen := map[string]bool{}
	for _, f := range got {
		k := f.File + ":" + strconv.Itoa(f.Line) + " " + f.Kind + " " + f.Name
		seen[k] = true
		w, ok := want[k]
		if !ok {
			t.Errorf("unexpected finding %+v", f)
			continue
		}
		if f.State+" "+f.By != w {
			t.Errorf("%s: got %s %s, want %s", k, f.State, f.By, w)
		}
		if f.State == StateMissing && f.Hint == "" {
			t.Errorf("%s: missing without a hint", k)
		}
		if f.Name == "pptx" && !strings.Contains(f.Hint, "image extra python-pptx") {
			t.Errorf("pptx hint %q does not name the extra", f.Hint)
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("no finding %s", k)
		}
	}
}
