package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/skillbox/skillbox/policy"
)

func TestPrintSkillScriptDirs(t *testing.T) {
	src := `policy "all" {
  skills = ["*"]
  tools  = ["skills.run_script"]
}
policy "core" {
  skills      = ["gif-*"]
  script_dirs = ["scripts", "core"]
}
policy "none" {
  skills      = ["gif-locked"]
  script_dirs = ["other"]
}
`
	cfg, err := policy.Parse([]byte(src), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for skill, want := range map[string]string{
		"plain":      "any file of the skill may be run",
		"gif-maker":  `only files under core/, scripts/ may be run (policy "core" (p.hcl:5))`,
		"gif-locked": "none: no script may be run",
	} {
		var b bytes.Buffer
		printSkill(&b, cfg, skill)
		if !strings.Contains(b.String(), "script_dirs  "+want) && !strings.Contains(b.String(), "script_dirs\t"+want) {
			t.Errorf("%s:\n%s\nwant script_dirs %q", skill, b.String(), want)
		}
	}
	var b bytes.Buffer
	printConfig(&b, cfg)
	if !strings.Contains(b.String(), "script_dirs  scripts core") {
		t.Errorf("config listing lacks the rule's script_dirs:\n%s", b.String())
	}
}

// policy check says each skill's isolation and the rule that decided it,
// each rule's isolation, and the sessions block.
func TestPrintIsolation(t *testing.T) {
	cfg, err := policy.Parse([]byte(`policy "nb" {
  skills    = ["nb-*"]
  isolation = "session"
}
sessions { idle_timeout = "0" }
`), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for skill, want := range map[string]string{
		"nb-plot": `isolation  session (policy "nb" (p.hcl:1))`,
		"pdf":     `isolation  run (default: no matching rule sets isolation = "session")`,
	} {
		var b bytes.Buffer
		printSkill(&b, cfg, skill)
		if got := strings.Join(strings.Fields(b.String()), " "); !strings.Contains(got, strings.Join(strings.Fields(want), " ")) {
			t.Errorf("%s:\n%s\nwant %q", skill, b.String(), want)
		}
	}
	var b bytes.Buffer
	printConfig(&b, cfg)
	got := strings.Join(strings.Fields(b.String()), " ")
	for _, want := range []string{"isolation session", "idle_timeout 0: session sandboxes are never checkpointed", "checkpoint_budget 4GiB", "max_sandboxes 16", "background_runs 8"} {
		if !strings.Contains(got, want) {
			t.Errorf("config listing lacks %q:\n%s", want, b.String())
		}
	}
}

// policy check explains a skill's allowed-tools entry by entry: what each
// host name maps to, and which are ignored.
func TestPrintAllowedTools(t *testing.T) {
	var b bytes.Buffer
	printAllowedTools(&b, []string{"Read", "Write", "Edit", "Bash(python:*)", "WebFetch", "Bash("})
	out := b.String()
	for _, want := range []string{
		"Read\thost read: covers skills.read;",
		"Write\thost write: covers none of skillbox's tools;",
		"Edit\thost write: covers none of skillbox's tools;",
		"Bash(python:*)\thost shell: covers skills.run_script, skills.run_code, skills.render_command(python:*);",
		"WebFetch\tnot a skillbox tool: covers none of skillbox's tools; ignored here",
		"Bash(\tinvalid: covers none of skillbox's tools;",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explanation lacks %q:\n%s", want, out)
		}
	}
}

// policy check says whether and where the daemon serves metrics.
func TestPrintMetrics(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"daemon {}\n", "metrics off"},
		{"daemon {\n  metrics = \"unix:/run/skillbox/metrics.sock\"\n}\n", "metrics unix:/run/skillbox/metrics.sock (mode and group of the socket)"},
		{"daemon {\n  metrics = \"127.0.0.1:9464\"\n}\n", "metrics 127.0.0.1:9464 (loopback)"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			cfg, err := policy.Parse([]byte(tc.src), "p.hcl")
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			printConfig(&b, cfg)
			if got := strings.Join(strings.Fields(b.String()), " "); !strings.Contains(got, tc.want) {
				t.Errorf("config listing lacks %q:\n%s", tc.want, b.String())
			}
		})
	}
}
