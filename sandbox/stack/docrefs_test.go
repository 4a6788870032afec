package stack_test

import (
	"bufio"
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
// or fenced) or as a path in prose.
func TestDocReferences(t *testing.T) {
	root := filepath.Join("..", "..")
	docs := []string{"README.md"}
	for _, pattern := range []string{"docs/*.md", "examples/*/README.md", "examples/*/*/README.md", "examples/*/*/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pattern)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, filepath.ToSlash(rel))
		}
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
				continue
			}
			if m := docIdent.FindStringSubmatch(ref.path); m != nil && exists(m[1]) {
				continue // a package and one of its identifiers
			}
			t.Errorf("%s:%d names %s, which is not in the tree", doc, ref.line, ref.path)
		}
	}
}

// docRef is a repository path a doc names, and the line it is on.
type docRef struct {
	path string
	line int
}

// docReferences reads the repository paths the markdown file names. dir is
// the file's directory in the repository, against which its relative links
// are resolved; every other path is the repository's own.
func docReferences(t *testing.T, file, dir string) []docRef {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var refs []docRef
	add := func(line int, word string) {
		if p, ok := repoPath(word); ok && !notRepoPaths[p] {
			refs = append(refs, docRef{p, line})
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
				add(n, w)
			}
			continue
		}
		for _, m := range docLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			add(n, path.Join(dir, target))
		}
		prose := docLink.ReplaceAllString(text, "]")
		for _, m := range docCode.FindAllStringSubmatch(prose, -1) {
			for _, w := range docSplit.Split(m[1]+m[2], -1) {
				add(n, w)
			}
		}
		prose = docCode.ReplaceAllString(prose, " ")
		for _, m := range docBare.FindAllStringSubmatch(prose, -1) {
			add(n, m[1])
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
