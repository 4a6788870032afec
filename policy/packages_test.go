package policy

import (
	"strings"
	"testing"
	"time"
)

func TestPackageSourcesAndDependencies(t *testing.T) {
	c, err := Parse([]byte(`
python_index {
  url        = "http://127.0.0.1:8080/simple/"
  find_links = ["wheels", "https://example.org/wheels/"]
}
npm_registry { url = "https://registry.npmjs.org" }
dependencies {
  when_not_ready = "fail"
  wait_timeout   = "30s"
  build_on_load  = false
  max_layer_bytes = "256MiB"
}
policy "docs" {
  skills = ["docx-*"]
  tools  = ["skills.run_script"]
  packages {
    python = ["python-pptx>=1.0"]
    npm    = ["left-pad@^1.3"]
  }
}
policy "src" {
  skills            = ["docx-build"]
  build_from_source = true
}
`), "/etc/skillbox/skillbox.hcl")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sources
	if s.PythonIndex != "http://127.0.0.1:8080/simple/" || len(s.FindLinks) != 2 || s.FindLinks[0] != "/etc/skillbox/wheels" || s.NpmRegistry != "https://registry.npmjs.org" {
		t.Errorf("sources: %+v", s)
	}
	if d := c.Deps; d.WhenNotReady != "fail" || d.WaitTimeout != 30*time.Second || d.BuildOnLoad || d.MaxLayerBytes != 256<<20 {
		t.Errorf("dependencies: %+v", d)
	}
	p := c.For("docx-build").Packages
	if strings.Join(p.Python, ",") != "python-pptx>=1.0" || strings.Join(p.Npm, ",") != "left-pad@^1.3" || !p.BuildFromSource || !strings.Contains(p.Where, "docs") {
		t.Errorf("packages for docx-build: %+v", p)
	}
	if p := c.For("docx-other").Packages; p.BuildFromSource || len(p.Python) != 1 {
		t.Errorf("packages for docx-other: %+v", p)
	}
	if p := c.For("other").Packages; len(p.Python)+len(p.Npm) != 0 || p.Where != "config" {
		t.Errorf("packages for other: %+v", p)
	}
	d := Default().Deps
	if d.WhenNotReady != "wait" || !d.BuildOnLoad || d.WaitTimeout <= 0 || d.MaxLayerBytes != 1<<30 {
		t.Errorf("default dependencies: %+v", d)
	}
}

func TestPackageConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"index not a URL", `python_index { url = "ftp://x" }`, "x.hcl:1"},
		{"index empty", "python_index {\n}\n", "set url"},
		{"registry without url", "npm_registry {\n}\n", "npm_registry.url"},
		{"bad when_not_ready", `dependencies { when_not_ready = "maybe" }`, "when_not_ready"},
		{"bad max_layer_bytes", `dependencies { max_layer_bytes = "lots" }`, "max_layer_bytes"},
		{"zero max_layer_bytes", `dependencies { max_layer_bytes = 0 }`, "greater than 0"},
		{"unknown key", "python_index {\n url = \"http://x/simple\"\n token = \"x\"\n}\n", "token"},
		{"python with a URL", "policy \"p\" {\n skills = [\"*\"]\n packages { python = [\"x @ https://h/x.whl\"] }\n}\n", "not a Python requirement"},
		{"npm with a path", "policy \"p\" {\n skills = [\"*\"]\n packages { npm = [\"file:../x\"] }\n}\n", "not an npm package"},
		{"two packages blocks", "policy \"p\" {\n skills = [\"*\"]\n packages {}\n packages {}\n}\n", "declared twice"},
		{"two indexes", "python_index { url = \"http://a/simple\" }\npython_index { url = \"http://b/simple\" }\n", "python_index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "x.hcl")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
