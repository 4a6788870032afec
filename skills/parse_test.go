package skills

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// measure returns the CPU time the calling thread spent in f, and the wall
// time. CPU time is what the hostile-input limits are about; wall time on a
// shared, loaded machine says little.
func measure(f func()) (cpu, wall time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &before)
	start := time.Now()
	f()
	wall = time.Since(start)
	unix.Getrusage(unix.RUSAGE_THREAD, &after)
	tv := func(v unix.Timeval) time.Duration { return time.Duration(v.Nano()) }
	cpu = tv(after.Utime) + tv(after.Stime) - tv(before.Utime) - tv(before.Stime)
	return cpu, wall
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string // substring; empty means success
		check   func(t *testing.T, d *Document)
	}{
		{
			name: "minimal",
			in:   "---\nname: a\ndescription: b\n---\n# Body\n",
			check: func(t *testing.T, d *Document) {
				if d.Frontmatter["name"] != "a" || d.Frontmatter["description"] != "b" {
					t.Errorf("frontmatter = %v", d.Frontmatter)
				}
				if d.Body != "# Body\n" {
					t.Errorf("body = %q", d.Body)
				}
				if strings.Join(d.Keys, ",") != "name,description" {
					t.Errorf("keys = %v", d.Keys)
				}
			},
		},
		{
			name: "crlf",
			in:   "---\r\nname: a\r\ndescription: b\r\n---\r\nline1\r\nline2\r\n",
			check: func(t *testing.T, d *Document) {
				if d.Frontmatter["description"] != "b" {
					t.Errorf("description = %q", d.Frontmatter["description"])
				}
				if d.Body != "line1\nline2\n" {
					t.Errorf("body = %q", d.Body)
				}
			},
		},
		{
			name: "closing fence at end of file without newline",
			in:   "---\nname: a\n---",
			check: func(t *testing.T, d *Document) {
				if d.Body != "" || d.Frontmatter["name"] != "a" {
					t.Errorf("doc = %+v", d)
				}
			},
		},
		{
			name: "fence with trailing blanks",
			in:   "---  \nname: a\n--- \t\nbody",
			check: func(t *testing.T, d *Document) {
				if d.Body != "body" {
					t.Errorf("body = %q", d.Body)
				}
			},
		},
		{
			name: "empty frontmatter parses, validation reports missing fields",
			in:   "---\n---\nbody\n",
			check: func(t *testing.T, d *Document) {
				if len(d.Frontmatter) != 0 {
					t.Errorf("frontmatter = %v", d.Frontmatter)
				}
			},
		},
		{
			name: "metadata values are strings as written",
			in:   "---\nmetadata:\n  version: 1.0\n  n: 007\n  ok: yes\n  on: true\n  none: ~\n  date: 2024-01-02\nversion: 1.0\n---\n",
			check: func(t *testing.T, d *Document) {
				md := d.Frontmatter["metadata"].(map[string]any)
				want := map[string]string{"version": "1.0", "n": "007", "ok": "yes", "on": "true", "none": "", "date": "2024-01-02"}
				for k, v := range want {
					if md[k] != v {
						t.Errorf("metadata[%s] = %#v, want %q", k, md[k], v)
					}
				}
				if d.Frontmatter["version"] != 1.0 {
					t.Errorf("top-level version = %#v", d.Frontmatter["version"])
				}
			},
		},
		{
			name: "typed top-level values",
			in:   "---\na: true\nb: 12\nc: [x, y]\nd: {k: v}\ne: null\nf: .inf\n---\n",
			check: func(t *testing.T, d *Document) {
				fm := d.Frontmatter
				if fm["a"] != true || fm["b"] != int64(12) || fm["e"] != nil || fm["f"] != ".inf" {
					t.Errorf("frontmatter = %#v", fm)
				}
				if l, ok := fm["c"].([]any); !ok || len(l) != 2 {
					t.Errorf("c = %#v", fm["c"])
				}
				if m, ok := fm["d"].(map[string]any); !ok || m["k"] != "v" {
					t.Errorf("d = %#v", fm["d"])
				}
			},
		},
		{name: "empty file", in: "", wantErr: "empty"},
		{name: "no opening fence", in: "name: a\n---\n", wantErr: "must start with a '---' line"},
		{name: "text before fence", in: "hello\n---\nname: a\n---\n", wantErr: "must start with a '---' line"},
		{name: "blank line before fence", in: "\n---\nname: a\n---\n", wantErr: "must start with a '---' line"},
		{name: "BOM", in: "\ufeff---\nname: a\n---\n", wantErr: "byte order mark"},
		{name: "unclosed", in: "---\nname: a\ndescription: b\n", wantErr: "not closed"},
		{name: "only opening fence", in: "---", wantErr: "not closed"},
		{name: "NUL in body", in: "---\nname: a\n---\nx\x00y", wantErr: "NUL"},
		{name: "NUL in frontmatter", in: "---\nname: a\x00\n---\n", wantErr: "NUL"},
		{name: "non-UTF-8", in: "---\nname: caf\xe9\n---\n", wantErr: "not valid UTF-8"},
		{name: "control character raw", in: "---\nname: a\x1b[31m\n---\n", wantErr: "control character U+001B"},
		{name: "control character escaped", in: "---\nname: \"a\\x07b\"\n---\n", wantErr: "control character U+0007"},
		{name: "C1 control character", in: "---\nname: a\u0085b\n---\n", wantErr: "control character U+0085"},
		{name: "DEL", in: "---\nname: a\x7f\n---\n", wantErr: "control character U+007F"},
		{name: "invalid YAML", in: "---\nname: [a\n---\n", wantErr: "not valid YAML"},
		{name: "not a mapping", in: "---\n- a\n- b\n---\n", wantErr: "must be a mapping"},
		{name: "scalar frontmatter", in: "---\njust text\n---\n", wantErr: "must be a mapping"},
		{name: "duplicate key", in: "---\nname: a\nname: b\n---\n", wantErr: "duplicate key at lines 2 and 3"},
		{name: "duplicate nested key", in: "---\nmetadata:\n  a: 1\n  a: 2\n---\n", wantErr: `duplicate key "a"`},
		{name: "alias", in: "---\nx: &a foo\nname: *a\n---\n", wantErr: "anchor"},
		{name: "alias only", in: "---\nname: *a\n---\n", wantErr: "not valid YAML"},
		{name: "merge key", in: "---\nbase: &b {k: v}\nother:\n  <<: *b\n---\n", wantErr: "anchor"},
		{name: "custom tag", in: "---\nname: !evil a\n---\n", wantErr: "YAML tag !evil"},
		{name: "binary tag", in: "---\nname: !!binary aGVsbG8=\n---\n", wantErr: "YAML tag !!binary"},
		{name: "complex key", in: "---\n? [a, b]\n: c\n---\n", wantErr: "keys must be plain strings"},
		{name: "document end marker then more", in: "---\nname: a\n...\nfoo\n---\n", wantErr: "single YAML document"},
		{name: "too deep", in: "---\na: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\n---\n", wantErr: "nested deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Parse([]byte(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				tt.check(t, d)
				return
			}
			if err == nil {
				t.Fatalf("Parse succeeded, want error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			var verrs ValidationErrors
			if !errors.As(err, &verrs) || len(verrs) == 0 {
				t.Errorf("error is not ValidationErrors: %T", err)
			}
		})
	}
}

// TestParseHostile feeds inputs that are cheap to write and expensive to
// decode; each must be refused quickly with a clear message.
func TestParseHostile(t *testing.T) {
	aliasBomb := func() string {
		// The classic billion laughs: each level references the previous
		// one nine times.
		var b strings.Builder
		b.WriteString("---\na0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
		for i := 1; i < 10; i++ {
			fmt.Fprintf(&b, "a%d: &a%d [", i, i)
			for j := 0; j < 9; j++ {
				if j > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, "*a%d", i-1)
			}
			b.WriteString("]\n")
		}
		b.WriteString("name: x\n---\n")
		return b.String()
	}
	manyKeys := func(n int) string {
		var b strings.Builder
		b.WriteString("---\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "k%d: v\n", i)
		}
		b.WriteString("---\n")
		return b.String()
	}
	tests := []struct {
		name    string
		in      string
		wantErr string
		tooBig  bool
	}{
		{name: "alias bomb", in: aliasBomb(), wantErr: "anchor"},
		{name: "80k keys", in: manyKeys(80_000), wantErr: "frontmatter is longer than", tooBig: true},
		{name: "keys just under the frontmatter cap", in: manyKeys(MaxFrontmatterSize/10 - 10), wantErr: ""},
		{name: "8 MB without closing fence", in: "---\n" + strings.Repeat("a: b\n", 8<<20/5), wantErr: "larger than", tooBig: true},
		{name: "900 KB without closing fence", in: "---\n" + strings.Repeat("a: b\n", 900<<10/5), wantErr: "frontmatter is longer than", tooBig: true},
		{name: "one long line without closing fence", in: "---\n" + strings.Repeat("a", 1000<<10), wantErr: "frontmatter is longer than", tooBig: true},
		{name: "BOM", in: "\xef\xbb\xbf---\nname: a\n---\n", wantErr: "byte order mark"},
		{name: "NUL", in: "---\nname: a\n---\n" + strings.Repeat("x", 1<<19) + "\x00", wantErr: "NUL"},
		{name: "non-UTF-8", in: "---\nname: a\n---\n" + strings.Repeat("x", 1<<19) + "\xff\xfe", wantErr: "not valid UTF-8"},
		{name: "deep flow nesting", in: "---\na: " + strings.Repeat("[", 20000) + "\n---\n", wantErr: "not valid YAML"},
		{name: "huge flow list", in: "---\na: [" + strings.Repeat("1,", 30000) + "1]\n---\n", wantErr: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			cpu, wall := measure(func() { _, err = Parse([]byte(tt.in)) })
			t.Logf("cpu %v, wall %v", cpu, wall)
			if cpu > raceSlowdown*500*time.Millisecond || wall > raceSlowdown*10*time.Second {
				t.Errorf("Parse took %v of CPU (%v wall), want well under a second", cpu, wall)
			}
			if tt.wantErr == "" {
				// Must merely be fast; the content is legal YAML.
				return
			}
			if err == nil {
				t.Fatalf("Parse succeeded, want error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", clip(err.Error(), 200), tt.wantErr)
			}
			if tt.tooBig && !errors.Is(err, ErrTooLarge) {
				t.Errorf("error does not wrap ErrTooLarge: %v", err)
			}
		})
	}
}
