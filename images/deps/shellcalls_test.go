package deps

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func callNames(calls []ShellCall) string {
	var out []string
	for _, c := range calls {
		out = append(out, fmt.Sprintf("%s:%d", c.Name, c.Line))
	}
	return strings.Join(out, " ")
}

func TestShellCalls(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"plain", "pdfinfo a.pdf\nqpdf --check a.pdf\n", "pdfinfo:1 qpdf:2"},
		{"each once, first line", "qpdf a\nqpdf b\n", "qpdf:1"},
		{"operators", "a | b; c && d || e & f |& g\n", "a:1 b:1 c:1 d:1 e:1 f:1 g:1"},
		{"arguments are not commands", "grep -r pdfinfo . | sort -u\n", "grep:1 sort:1"},
		{"builtins and keywords", "set -euo pipefail\ncd /x; echo hi; printf x; test -f y; [ -f z ]; read v; export A=1; local b\n", ""},
		{"assignments", "A=1 B=\"$(pdftotext x -)\" soffice --version\nC=2\n", "pdftotext:1 soffice:1"},
		{"command substitution", "n=$(pdfinfo \"$f\" | grep Pages | awk '{print $2}')\n", "pdfinfo:1 grep:1 awk:1"},
		{"in double quotes", "echo \"pages: $(pdfinfo x | wc -l) and `date`\"\n", "pdfinfo:1 wc:1 date:1"},
		{"backquotes", "v=`qpdf --version`\n", "qpdf:1"},
		{"nested", "x=$(a $(b `c`))\n", "a:1 b:1 c:1"},
		{"process substitution", "diff <(sort a) >(tee b)\n", "diff:1 sort:1 tee:1"},
		{"comments", "# pdfinfo here\nls # and soffice there\n", "ls:2"},
		{"quotes are not commands", "echo 'a; pdfinfo b' \"c | qpdf\"\n", ""},
		{"multi-line quote", "echo 'one\ntwo; pdfinfo\nthree'\nqpdf x\n", "qpdf:4"},
		{"heredoc body", "cat <<EOF\npdfinfo is text here\nEOF\nqpdf x\n", "cat:1 qpdf:4"},
		{"quoted heredoc, rest of line", "python3 - <<'PY' | sort\nimport os\nos.system('x')\nPY\nsoffice --version\n", "python3:1 sort:1 soffice:5"},
		{"heredoc with tabs", "cat <<-END\n\tls\n\tEND\npandoc x\n", "cat:1 pandoc:4"},
		{"here-string", "grep x <<< \"$v\"\n", "grep:1"},
		{"redirections", "> out.txt pdfinfo a 2>/dev/null\nqpdf a >&2 2>&1\n", "pdfinfo:1 qpdf:2"},
		{"if while for", "if pdfinfo a; then qpdf b; elif c; else d; fi\nwhile e; do f; done\nfor x in g h; do i; done\nuntil j; do :; done\n", "pdfinfo:1 qpdf:1 c:1 d:1 e:2 f:2 i:3 j:4"},
		{"for on lines", "for f in *.pdf\ndo\n  pdfinfo \"$f\"\ndone\n", "pdfinfo:3"},
		{"arithmetic", "((i++))\nfor ((i=0; i<3; i++)); do qpdf; done\nx=$((1+2)) soffice\n", "qpdf:2 soffice:3"},
		{"case", "case \"$1\" in\n  a|b) pdfinfo x ;;\n  (c) qpdf y\n     pandoc z ;;\n  *) soffice ;;\nesac\nls\n", "pdfinfo:2 qpdf:3 pandoc:4 soffice:5 ls:7"},
		{"case without last ;;", "case x in y) a\nesac\nb\n", "a:1 b:3"},
		{"test brackets", "[[ -f x && y == z || ( -n $v ) ]] && pdfinfo x\n", "pdfinfo:1"},
		{"functions", "convert_one() {\n  pdftoppm \"$1\" out\n}\nfunction helper {\n  qpdf x\n}\nconvert_one a\nhelper\n", "pdftoppm:2 qpdf:5"},
		{"function named like a program", "soffice() { echo no; }\nsoffice --version\n", ""},
		{"groups and subshells", "{ a; b; } > log\n( c; d )\n", "a:1 b:1 c:2 d:2"},
		{"wrappers", "env -i PATH=/x LANG=C pdfinfo a\nxargs -0 -n 1 qpdf < list\ntimeout -s KILL 30 soffice --headless\nnohup pandoc x &\nexec gs -q\ncommand -v mutool\ncommand ffmpeg -i x\ntime -p convert a b\n",
			"env:1 pdfinfo:1 xargs:2 qpdf:2 timeout:3 soffice:3 nohup:4 pandoc:4 gs:5 ffmpeg:7 convert:8"},
		{"paths", "./run.sh\nscripts/x.sh\n/usr/bin/pdfinfo a\n\"$DIR/tool\" x\n$SOFFICE --version\n../up\n/opt/../etc/x\n", "/usr/bin/pdfinfo:3"},
		{"line continuation", "pdfinfo \\\n  a.pdf \\\n  && qpdf b\n", "pdfinfo:1 qpdf:3"},
		{"arrays and extglob", "arr=(one two three)\nshopt -s extglob\nls @(a|b)\nfiles+=(x)\n", "ls:3"},
		{"escaped operators", "echo a\\;pdfinfo b\n", ""},
		{"ansi-c quote", "printf $'a\\'b'; qpdf\n", "qpdf:1"},
		{"parameter expansion", "v=${x:-$(pdfinfo a)}\necho ${y//;/ } ; qpdf\n", "qpdf:2"},
		{"crlf", "pdfinfo a\r\nqpdf b\r\n", "pdfinfo:1 qpdf:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := callNames(ShellCalls([]byte(tc.src))); got != tc.want {
				t.Errorf("ShellCalls(%q)\n got: %s\nwant: %s", tc.src, got, tc.want)
			}
		})
	}
}

// TestShellCallsParsed: what a reading by a real parser sees that a
// tokenizer did not, and how it goes on past what the parser rejects.
func TestShellCallsParsed(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"unquoted heredoc body runs substitutions", "cat <<E\n$(pdfinfo x)\nE\n", "cat:1 pdfinfo:2"},
		{"heredoc read after the next command", "cat <<E; qpdf\nbody $(soffice)\nE\nls\n", "cat:1 qpdf:1 soffice:2 ls:4"},
		{"arithmetic substitution", "n=$(( $(wc -l < f) + 1 ))\n", "wc:1"},
		{"array of a substitution", "files=($(find . -name x))\n", "find:1"},
		{"declarations", "declare -a arr=($(ls)) ; export P=$(pwd) ; local v=$(id -u)\n", "ls:1 id:1"},
		{"nested wrappers", "sudo -u root env A=1 nice -n 5 pdfinfo x\n", "sudo:1 env:1 nice:1 pdfinfo:1"},
		{"time, coproc, negation", "coproc tee x\ntime nice ls\n! grep -q x f\n", "tee:1 nice:2 ls:2 grep:3"},
		{"exec", "exec -a name gs -q\nexec >log 2>&1\n", "gs:1"},
		{"substitution over lines", "echo \"$(\n  pdfinfo x\n)\"\n", "pdfinfo:2"},
		{"lists over lines", "a &&\n  b ||\n c\n", "a:1 b:2 c:3"},
		{"test substitution", "if [[ -n $(jq .) ]]; then :; fi\nselect x in a b; do qpdf; done\n", "jq:1 qpdf:2"},
		{"more lines than a parser position holds", strings.Repeat(":\n", 300000) + "qpdf\n", "qpdf:300001"},
		// Syntax errors: the commands around the error still count.
		{"error inside a function", "main() {\n  a\n  b )\n  c\n}\nd\n", "a:2 c:4 d:6"},
		{"unclosed quote ends the reading", "a\necho 'x\nb\n", "a:1"},
		{"unclosed substitution at the end", "a\nx=$(b\n", "a:1 b:2"},
		{"stray keyword", "a; fi; b\ndone\nc\n", "a:1 b:1 c:3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := callNames(ShellCalls([]byte(tc.src))); got != tc.want {
				t.Errorf("ShellCalls(%.80q)\n got: %s\nwant: %s", tc.src, got, tc.want)
			}
		})
	}
}

// TestShellCallsDeepNesting: a script of the largest size read, nested as
// deep as it can be, neither grows the parser's stack without bound (it
// would pass Go's 1 GB limit and end the daemon) nor hides the commands
// on the lines around it.
func TestShellCallsDeepNesting(t *testing.T) {
	for name, open := range map[string]string{"subshell": "(", "substitution": "$(", "block": "{ ", "test": "[[ ( ", "if": "if a; then "} {
		t.Run(name, func(t *testing.T) {
			src := "pdfinfo\n" + strings.Repeat(open, maxScriptScan/len(open)) + "\nqpdf\n"
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got := callNames(ShellCalls([]byte(src)))
			runtime.ReadMemStats(&after)
			if !strings.HasPrefix(got, "pdfinfo:1") || !strings.HasSuffix(got, "qpdf:3") {
				t.Errorf("got %s, want pdfinfo:1 ... qpdf:3", got)
			}
			if grew := int64(after.StackInuse) - int64(before.StackInuse); grew > 64<<20 {
				t.Errorf("stack grew by %d MB", grew>>20)
			}
		})
	}
}

// TestShellCallsFixtures reads the shell scripts of testdata/shell: the
// first line of each is "# want: NAME:LINE ...".
func TestShellCallsFixtures(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "shell", "*.sh"))
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(b), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("%s: first line is not # want: …", f)
			}
			if got := callNames(ShellCalls(b)); got != strings.TrimSpace(want) {
				t.Errorf("got:  %s\nwant: %s", got, want)
			}
		})
	}
}

var fuzzNameRE = regexp.MustCompile(`^[A-Za-z0-9_/][A-Za-z0-9_.+@:/-]*$`)

func FuzzShellCalls(f *testing.F) {
	f.Add([]byte("pdfinfo a | qpdf b && soffice --version\n"))
	f.Add([]byte("x=$(a `b $(c)` \"$(d)\") <(e) >(f)\ncat <<-'E'\n\tz\n\tE\n"))
	f.Add([]byte("case $x in (a|b) c;; *) d;; esac; [[ a && b ]]; f() { g; }; ((i++)); arr=(1 2)\n"))
	f.Add([]byte("$((((((((\n'unterminated \"\n`$(`\n<<\n<<E\n${{{{\n"))
	files, _ := filepath.Glob(filepath.Join("testdata", "shell", "*.sh"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		lines := strings.Count(string(src), "\n") + 1
		calls := ShellCalls(src)
		seen := map[string]bool{}
		for _, c := range calls {
			if !fuzzNameRE.MatchString(c.Name) {
				t.Fatalf("call name %q is not a plain program name", c.Name)
			}
			if strings.Contains(c.Name, "/") && !strings.HasPrefix(c.Name, "/") {
				t.Fatalf("relative path %q reported", c.Name)
			}
			if shBuiltins[c.Name] {
				t.Fatalf("builtin %q reported", c.Name)
			}
			if c.Line < 1 || c.Line > lines {
				t.Fatalf("call %q at line %d of a %d-line script", c.Name, c.Line, lines)
			}
			if seen[c.Name] {
				t.Fatalf("%q reported twice", c.Name)
			}
			seen[c.Name] = true
		}
		if again := ShellCalls(src); callNames(again) != callNames(calls) {
			t.Fatalf("not deterministic: %s vs %s", callNames(again), callNames(calls))
		}
	})
}

// TestShellCallsPathological: inputs built to make a tokenizer loop,
// recurse or go quadratic finish (the test's own timeout is the bound).
func TestShellCallsPathological(t *testing.T) {
	for name, src := range map[string]string{
		"open substitutions":  strings.Repeat("$(", 100000),
		"backquotes":          strings.Repeat("`a ", 100000),
		"escaped backquotes":  strings.Repeat("`\\`\\\\\\`", 50000),
		"parens":              strings.Repeat("(", 100000) + strings.Repeat(")", 100000),
		"heredocs":            strings.Repeat("cat <<E <<F <<G\n", 50000),
		"parameter braces":    strings.Repeat("${", 100000),
		"many commands":       strings.Repeat("a | b ; c && d\n", 100000),
		"quoted substitution": strings.Repeat("\"$(\"", 100000),
		"arrays":              strings.Repeat("a=(", 100000),
		"cases":               strings.Repeat("case x in a) ", 50000),
	} {
		t.Run(name, func(t *testing.T) { ShellCalls([]byte(src)) })
	}
}

// BenchmarkShellCalls reads each fixture of testdata/shell, and all of them
// joined a hundred times over as one long script.
func BenchmarkShellCalls(b *testing.B) {
	files, _ := filepath.Glob(filepath.Join("testdata", "shell", "*.sh"))
	var all []byte
	scripts := map[string][]byte{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		scripts[filepath.Base(f)] = src
		all = append(all, src...)
	}
	scripts["all-x100"] = bytes.Repeat(all, 100)
	for name, src := range scripts {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				ShellCalls(src)
			}
		})
	}
}
