package stack_test

import (
	"bufio"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoTop are the top-level entries of the repository. A word of a doc is
// taken for a path of the repository only when its first segment is one of
// them, so paths inside a sandbox (/work/outputs, /skill/scripts) and on
// the host (/var/lib/skillbox) are left alone.
var repoTop = map[string]bool{
	"cmd": true, "sandbox": true, "runtime": true, "policy": true, "skills": true, "images": true,
	"hack": true, "docs": true, "examples": true, "Makefile": true, "README.md": true, "go.mod": true,
}

// notRepoPaths are words of the docs that look like repository paths and
// are not: MCP methods, and paths of a run's directory or the state
// directory that docs/SECURITY.md's table gives relative to it.
var notRepoPaths = map[string]bool{
	"skills/list": true, "skills/get": true, // MCP methods (docs/MCP.md)
	"skills/.code": true, "images/locks": true, // under a run dir and the state dir
}

var (
	// docLink is the target of a markdown link: [text](target).
	docLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// docCode is an inline code span, `x` or `` x ``.
	docCode = regexp.MustCompile("``\\s?(.+?)\\s?``|`([^`]+)`")
	// docBare is a path-like word in prose: it has a slash in it.
	docBare = regexp.MustCompile(`(?:^|[\s(])((?:[\w.-]+/)+[\w.-]*)`)
	// docSplit cuts a code span into the words that may be paths.
	docSplit = regexp.MustCompile(`[\s|,;()'"=\[\]]+`)
	// docIdent is a Go identifier after a package path: sandbox/api.Peer.
	docIdent = regexp.MustCompile(`^(.+)\.[A-Z]\w*$`)
)

// TestDocReferences fails for every Go package path of this module and
// every file path of the repository that README.md, docs/*.md or an
// example's README.md names and the tree lacks: in a link, in code (inline
// or fenced) or as a path in prose. A link's #anchor must name a heading of
// the file it links to.
func TestDocReferences(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	docs := []string{"README.md"}
	md, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range md {
		docs = append(docs, "docs/"+filepath.Base(f))
	}
	err = filepath.WalkDir(filepath.Join(root, "examples"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "README.md" {
			rel, _ := filepath.Rel(root, p)
			docs = append(docs, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 5 {
		t.Fatalf("found only %d docs under %s", len(docs), root)
	}
	exists := func(p string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
		return err == nil
	}
	for _, doc := range docs {
		for _, ref := range docReferences(t, filepath.Join(root, filepath.FromSlash(doc)), path.Dir(doc)) {
			if exists(ref.path) {
				if ref.anchor != "" && strings.HasSuffix(ref.path, ".md") && !headings(t, filepath.Join(root, filepath.FromSlash(ref.path)))[ref.anchor] {
					t.Errorf("%s:%d links to %s#%s, a heading it does not have", doc, ref.line, ref.path, ref.anchor)
				}
				continue
			}
			if m := docIdent.FindStringSubmatch(ref.path); m != nil && exists(m[1]) {
				continue // a package and one of its identifiers
			}
			t.Errorf("%s:%d names %s, which is not in the tree", doc, ref.line, ref.path)
		}
	}
}

// headings are the anchors of a markdown file's headings, as GitHub makes
// them: lower case, punctuation dropped, spaces as hyphens.
func headings(t *testing.T, file string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fenced || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		slug := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, strings.TrimSpace(title))
		out[slug] = true
	}
	return out
}

// docRef is a repository path a doc names, the line it is on and, for a
// link, the anchor it points to.
type docRef struct {
	path   string
	line   int
	anchor string
}

// docReferences reads the repository paths the markdown file names. dir is
// the file's directory in the repository, against which its relative links
// are resolved; every other path is the repository's own.
func docReferences(t *testing.T, file, dir string) []docRef {
	self := filepath.Base(file)
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var refs []docRef
	add := func(line int, word, anchor string) {
		if p, ok := repoPath(word); ok && !notRepoPaths[p] {
			refs = append(refs, docRef{p, line, anchor})
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	fenced := false
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(text), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			for _, w := range docSplit.Split(text, -1) {
				add(n, w, "")
			}
			continue
		}
		for _, m := range docLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(target, "#")
			if target == "" {
				target = self
			}
			add(n, path.Join(dir, target), anchor)
		}
		prose := docLink.ReplaceAllString(text, "]")
		for _, m := range docCode.FindAllStringSubmatch(prose, -1) {
			for _, w := range docSplit.Split(m[1]+m[2], -1) {
				add(n, w, "")
			}
		}
		prose = docCode.ReplaceAllString(prose, " ")
		for _, m := range docBare.FindAllStringSubmatch(prose, -1) {
			add(n, m[1], "")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return refs
}

// repoPath says which path of the repository a word of a doc names, if it
// names one: this module's import paths, and paths whose first segment is
// a top-level entry. A placeholder or wildcard (<name>, *, ..., {a,b}, $X)
// ends the path before it; a position (file:line) and an anchor are cut.
func repoPath(word string) (string, bool) {
	w := strings.TrimPrefix(word, "./")
	if rest, ok := strings.CutPrefix(w, module); ok {
		w = rest
	} else if strings.HasPrefix(w, strings.TrimSuffix(module, "/")) {
		return "", false // the module itself
	}
	if i := strings.IndexAny(w, "<*{$#:?…"); i >= 0 {
		w = w[:i]
	}
	if i := strings.Index(w, "..."); i >= 0 {
		w = w[:i]
	}
	w = strings.TrimRightFunc(w, func(r rune) bool { return r == '/' || (unicode.IsPunct(r) && r != '_') })
	first, _, _ := strings.Cut(w, "/")
	if !repoTop[first] || (first == w && !strings.Contains(first, ".") && first != "Makefile") {
		return "", false // not the repository's, or a bare word like "policy"
	}
	return w, true
}

// TestDocPackages keeps docs/ARCHITECTURE.md's line per package with the
// layer picture: every package of it is named there by its path.
func TestDocPackages(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range layers {
		for _, pkg := range row {
			if !strings.Contains(string(data), "`"+pkg+"`") {
				t.Errorf("docs/ARCHITECTURE.md does not name package %s: give it its line in \"The packages\"", pkg)
			}
		}
	}
}
