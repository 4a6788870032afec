package deps

import (
	"bytes"
	"cmp"
	"errors"
	"io"
	"runtime"
	"sort"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// A static reading of shell scripts: which programs a script starts by a
// literal name. mvdan.cc/sh's parser (the one behind shfmt) reads the
// script as bash into a syntax tree, and every command of it is looked at:
// in pipelines, lists, subshells, groups, functions, command and process
// substitutions, backquotes, [[ ]] tests and unquoted here-documents, past
// assignments, redirections and wrappers like env, sudo or xargs. It never
// runs anything. Names built at run time ($cmd, "$(which x)") are not seen,
// nor what a parameter expansion's operand would run (${x:-$(cmd)}).
//
// Scripts are untrusted and the daemon reads them on every run, so the
// parser is fed through a reader that bounds it: how deep the parser's own
// stack grows, how much input one top-level command may span (its tree is
// held until it ends) and how much input all attempts read together. A
// script the parser rejects costs findings, not a failure: the commands
// before the error are kept and the reading resumes on a later line (see
// ShellCalls).

// ShellCall is a program a shell script starts: its name as written (a
// bare name looked up on PATH, or an absolute path) and the first line
// that starts it.
type ShellCall struct {
	Name string
	Line int
}

const (
	// maxShellFrames bounds the parser's call stack, in frames (a level of
	// $( ) nesting takes about eight; a frame a few hundred bytes), so a
	// hostile nesting cannot grow a goroutine's stack without limit.
	maxShellFrames = 4096
	// shellReadChunk is how much the parser gets per read (its own buffer
	// is as large): the stack is checked between reads, so it can grow by
	// at most this many bytes of nesting past maxShellFrames.
	shellReadChunk = 1 << 10
	// maxShellStmtBytes bounds the input one top-level command spans; the
	// parser holds its tree (some 80 bytes per byte of input) until it ends.
	maxShellStmtBytes = 256 << 10
	// maxShellRecovered is how many missing closing tokens (an unclosed
	// $( or fi at the end of the script) the parser supplies itself.
	maxShellRecovered = 16
	// maxShellLineErrors is how many syntax errors one line may have
	// before the reading resumes on the next line instead.
	maxShellLineErrors = 8
	// shellParseCost is what an attempt costs the budget besides its input.
	shellParseCost = 256
	// maxShellPending bounds the commands held back for a here-document
	// body the parser reads after them (cat <<E; next), and
	// maxShellStmtBytes the input they span together.
	maxShellPending = 64
)

var (
	errShellDeep   = errors.New("shell script nests deeper than the reading follows")
	errShellLong   = errors.New("shell command spans more input than the reading holds")
	errShellBudget = errors.New("shell script took more reading than its size allows")
)

// ShellCalls returns the programs the shell script src starts by a literal
// name, each once, in order of first appearance. Shell builtins and
// keywords, functions the script defines, and paths relative to the working
// directory or the skill (./x, scripts/x.sh) are left out.
//
// Where the parser rejects the script, the commands it read whole before
// the error count, and the reading starts again past the first word of
// the command that failed (if, {, name(): its inner commands are then read
// on their own) or, when the error is at that command's start or it was
// retried already, past the word at the error; after eight errors on one
// line it resumes on the next line. An error at the end of the input (an
// unclosed quote or here-document, which the rest of the script is inside)
// ends the reading, and so does the budget: all attempts together lex at
// most four times the script plus a megabyte. A parse that nests past
// maxShellFrames resumes on the line after the one it reached, and a
// top-level command longer than maxShellStmtBytes is read again past its
// first word once.
func ShellCalls(src []byte) []ShellCall {
	if bytes.Contains(src, []byte("\r\n")) {
		// Scripts written on Windows: bash would take each \r into the
		// line's last word; it is read as the line end it was meant as.
		src = bytes.ReplaceAll(src, []byte("\r\n"), []byte("\n"))
	}
	s := &shellScan{
		src:     src,
		funcs:   map[string]bool{},
		first:   map[string]int{},
		retried: map[int]bool{},
		budget:  4*len(src) + 1<<20,
	}
	for start := 0; start < len(src); {
		next, more := s.parse(start)
		if !more || next <= start {
			break
		}
		start = next
	}
	names := make([]string, 0, len(s.first))
	for name := range s.first {
		if !s.funcs[name] {
			names = append(names, name)
		}
	}
	sort.Slice(names, func(i, j int) bool { return s.first[names[i]] < s.first[names[j]] })
	out := make([]ShellCall, len(names))
	for i, name := range names {
		out[i] = ShellCall{Name: name, Line: s.lineOf(s.first[name])}
	}
	return out
}

// shellScan is one reading of a script.
type shellScan struct {
	src      []byte
	funcs    map[string]bool // functions the script defines
	first    map[string]int  // program → offset of its first command word
	retried  map[int]bool    // error offsets already retried from their command's start
	budget   int             // bytes all parses may still read
	long     bool            // the last parse stopped at maxShellStmtBytes
	errLine  int             // the line of the last syntax error
	errCount int             // how many syntax errors that line had
	lines    []int           // offsets of line starts, built on first use
}

// parse reads the script from offset base, records its calls, and says
// where to resume after a syntax error (more false: nothing to resume).
func (s *shellScan) parse(base int) (resume int, more bool) {
	r := &shellReader{src: s.src[base:], scan: s}
	p := syntax.NewParser(syntax.Variant(syntax.LangBash), syntax.RecoverErrors(maxShellRecovered))
	var pending []*syntax.Stmt
	held := 0 // input bytes the pending commands span
	var err error
	done := base // the end of the commands read whole
	// The loop never breaks: StmtsSeq (v3.14.1) yields its error once
	// more after the loop body stopped it, which Go turns into a panic.
	// After an error the parser is at its end; only the first one counts.
	for st, e := range p.StmtsSeq(r) {
		if err != nil || e != nil {
			err = cmp.Or(err, e)
			continue
		}
		r.mark = r.off
		end, complete := s.walk(st, base)
		done = max(done, end)
		if !complete {
			// Held until its body is read; past the bounds the oldest
			// goes, its body's commands unread.
			pending = append(pending, st)
			held += shellSpan(st)
			for len(pending) > maxShellPending || held > maxShellStmtBytes {
				held -= shellSpan(pending[0])
				pending = pending[1:]
			}
		}
	}
	for _, st := range pending {
		end, _ := s.walk(st, base)
		done = max(done, end)
	}
	if err != errShellLong {
		s.long = false
	}
	var pos syntax.Pos
	var pe syntax.ParseError
	var le syntax.LangError
	switch {
	case err == nil, err == errShellBudget:
		return 0, false
	case err == errShellDeep:
		return s.nextLine(base + r.off - 1), true
	case err == errShellLong:
		// Once read again past its first word (a function's or a block's
		// commands are then read one by one); a second time in a row, the
		// reading skips the lines the parser read.
		if again := s.long; !again {
			s.long = true
			return s.skipWord(s.skipBlank(done)), true
		}
		s.long = false
		return s.nextLine(base + r.off - 1), true
	case errors.As(err, &pe):
		if pe.Incomplete {
			return 0, false
		}
		pos = pe.Pos
	case errors.As(err, &le):
		pos = le.Pos
	default:
		return 0, false
	}
	if !pos.IsValid() {
		return 0, false
	}
	at := base + int(pos.Offset())
	// The parser read ahead of the error by up to a chunk it did not lex:
	// charge what it lexed, and a set-up cost per attempt.
	s.budget += min(max(r.off-(max(at, done)-base), 0), shellReadChunk) - shellParseCost
	if line := s.lineOf(at); line != s.errLine {
		s.errLine, s.errCount = line, 0
	}
	if s.errCount++; s.errCount > maxShellLineErrors {
		return s.nextLine(at), true
	}
	if start := s.skipBlank(done); start < at && !s.retried[start] {
		// The command that failed began before the error: read it again
		// past its first word (if, {, name()), so that its inner
		// commands are read on their own.
		s.retried[start] = true
		return s.skipWord(start), true
	}
	return s.skipWord(max(at, base)), true
}

// shellSpan is how many bytes of input st spans.
func shellSpan(st *syntax.Stmt) int {
	return max(int(st.End().Offset())-int(st.Pos().Offset()), 1)
}

// walk records the calls of st and the functions it defines. It returns
// the offset where st ends, its here-document bodies included, and
// whether none of them is still unread.
func (s *shellScan) walk(st *syntax.Stmt, base int) (end int, complete bool) {
	complete = true
	end = base + int(st.End().Offset())
	syntax.Walk(st, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.ParamExp:
			return false // ${x:-$(cmd)}: runs only if x is unset; not looked into
		case *syntax.FuncDecl:
			if n.Name != nil {
				s.funcs[n.Name.Value] = true
			}
			for _, l := range n.Names {
				s.funcs[l.Value] = true
			}
		case *syntax.Redirect:
			if n.Op != syntax.Hdoc && n.Op != syntax.DashHdoc {
				break
			}
			if n.Hdoc == nil {
				complete = false
			} else if e := n.Hdoc.End(); e.IsValid() {
				end = max(end, base+int(e.Offset()))
			}
		case *syntax.CallExpr:
			s.call(n.Args, base)
		}
		return true
	})
	return end, complete
}

// call records the program a simple command's words start: the first word,
// or, after a wrapper (env, sudo, xargs, exec, command, ...), the word its
// options and their values lead to.
func (s *shellScan) call(args []*syntax.Word, base int) {
	var wr *shWrapper
	skip, npos := false, 0
	for _, a := range args {
		w, lit := shellWordText(a)
		if wr != nil {
			switch {
			case skip:
				skip = false
				continue
			case wr.noCmd[w]:
				return
			case strings.HasPrefix(w, "-") && len(w) > 1:
				if w != "--" {
					skip = wr.argOpts[w]
				}
				continue
			case wr == shWrappers["env"] && isAssignment(w):
				continue
			case npos > 0:
				npos--
				continue
			}
			wr = nil
		}
		// The command word.
		if isAssignment(w) {
			continue // after a wrapper: sudo VAR=value cmd
		}
		if !lit {
			return
		}
		if shKeepsCommand[w] {
			continue // else d, read again past an error: d is the command
		}
		if next, ok := shWrappers[w]; ok {
			if next.program {
				s.add(w, base+int(a.Pos().Offset()))
			}
			wr, skip, npos = next, false, next.pos
			continue
		}
		if !shBuiltins[w] {
			s.add(w, base+int(a.Pos().Offset()))
		}
		return
	}
}

func (s *shellScan) add(name string, off int) {
	if !isProgramName(name) {
		return
	}
	if at, ok := s.first[name]; !ok || off < at {
		s.first[name] = off
	}
}

// lineOf returns the 1-based line of offset off.
func (s *shellScan) lineOf(off int) int {
	if s.lines == nil {
		s.lines = []int{0}
		for i, c := range s.src {
			if c == '\n' {
				s.lines = append(s.lines, i+1)
			}
		}
	}
	return sort.Search(len(s.lines), func(i int) bool { return s.lines[i] > off })
}

// nextLine returns the offset of the line after the one holding off.
func (s *shellScan) nextLine(off int) int {
	if off < 0 {
		off = 0
	}
	if off >= len(s.src) {
		return len(s.src)
	}
	if i := bytes.IndexByte(s.src[off:], '\n'); i >= 0 {
		return off + i + 1
	}
	return len(s.src)
}

// skipBlank returns the offset of the first character at or after off
// that is neither blank, a line end, a ; nor in a comment.
func (s *shellScan) skipBlank(off int) int {
	for off < len(s.src) {
		switch s.src[off] {
		case ' ', '\t', '\n', '\r', ';':
			off++
		case '#':
			off = s.nextLine(off)
		default:
			return off
		}
	}
	return off
}

// skipWord returns the offset just past the word or operator at off (at
// least one byte further), quotes and escapes in the word skipped whole.
func (s *shellScan) skipWord(off int) int {
	const ops = " \t\n\r;&|()<>"
	if off >= len(s.src) {
		return len(s.src)
	}
	if strings.IndexByte(ops, s.src[off]) >= 0 {
		return off + 1
	}
	for off < len(s.src) && strings.IndexByte(ops, s.src[off]) < 0 {
		switch c := s.src[off]; c {
		case '\\':
			off += 2
		case '\'', '"':
			off++
			for off < len(s.src) && s.src[off] != c {
				if c == '"' && s.src[off] == '\\' {
					off++
				}
				off++
			}
			off++
		default:
			off++
		}
	}
	return min(off, len(s.src))
}

// shellReader feeds the parser in small pieces and stops it (a read
// error, which the parser returns) when it nests too deep, when one
// top-level command spans too much input, or when the reading's budget is
// spent.
type shellReader struct {
	src  []byte
	off  int // bytes handed to the parser
	mark int // off when the last top-level command ended
	scan *shellScan
	pc   [1]uintptr
}

func (r *shellReader) Read(p []byte) (int, error) {
	if r.off >= len(r.src) {
		return 0, io.EOF
	}
	// A frame past maxShellFrames: the parser has recursed that deep.
	if runtime.Callers(maxShellFrames, r.pc[:]) > 0 {
		return 0, errShellDeep
	}
	if r.off-r.mark > maxShellStmtBytes {
		return 0, errShellLong
	}
	if r.scan.budget <= 0 {
		return 0, errShellBudget
	}
	n := copy(p[:min(len(p), shellReadChunk, r.scan.budget)], r.src[r.off:])
	r.off += n
	r.scan.budget -= n
	return n, nil
}

// shellWordText returns the text of a word with its quotes and escapes
// removed, each expansion in it written as \x00, and whether it had none
// (a literal word).
func shellWordText(w *syntax.Word) (string, bool) {
	if len(w.Parts) == 1 {
		if l, ok := w.Parts[0].(*syntax.Lit); ok && !strings.ContainsRune(l.Value, '\\') {
			return l.Value, true
		}
	}
	var b strings.Builder
	lit := true
	for _, part := range w.Parts {
		switch x := part.(type) {
		case *syntax.Lit:
			unescape(&b, x.Value, "")
		case *syntax.SglQuoted:
			if x.Dollar {
				b.WriteByte(0) // $'...': escapes are expanded
				lit = false
			} else {
				b.WriteString(x.Value)
			}
		case *syntax.DblQuoted:
			if x.Dollar {
				b.WriteByte(0) // $"...": translated
				lit = false
				continue
			}
			for _, q := range x.Parts {
				if l, ok := q.(*syntax.Lit); ok {
					unescape(&b, l.Value, "$`\"\\\n")
				} else {
					b.WriteByte(0)
					lit = false
				}
			}
		default:
			b.WriteByte(0)
			lit = false
		}
	}
	return b.String(), lit
}

// unescape writes s to b with the shell's backslash escapes removed: every
// escape when only is empty (unquoted text), else those of the characters
// in only (inside double quotes); an escaped newline is removed.
func unescape(b *strings.Builder, s, only string) {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && (only == "" || strings.IndexByte(only, s[i+1]) >= 0) {
			i++
			if s[i] == '\n' {
				continue
			}
		}
		b.WriteByte(s[i])
	}
}

// shWrapper is a command that runs another: which of its options take a
// separate value, and how many positional words come before the command.
type shWrapper struct {
	program bool            // a program itself (reported), not a builtin or keyword
	argOpts map[string]bool // options followed by a value word
	pos     int
	noCmd   map[string]bool // options after which no command follows (command -v)
}

var shWrappers = map[string]*shWrapper{
	"env":     {program: true, argOpts: stringSet("-u", "--unset", "-C", "--chdir", "-S", "--split-string")},
	"nohup":   {program: true},
	"setsid":  {program: true},
	"nice":    {program: true, argOpts: stringSet("-n", "--adjustment")},
	"ionice":  {program: true, argOpts: stringSet("-c", "-n", "-p", "-P", "-u")},
	"stdbuf":  {program: true, argOpts: stringSet("-i", "-o", "-e")},
	"timeout": {program: true, argOpts: stringSet("-s", "--signal", "-k", "--kill-after"), pos: 1},
	"xargs":   {program: true, argOpts: stringSet("-I", "-n", "-L", "-P", "-d", "-E", "-s", "-a", "--delimiter", "--max-args", "--max-procs", "--arg-file")},
	"sudo":    {program: true, argOpts: stringSet("-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U")},
	"flock":   {program: true, argOpts: stringSet("-w", "--timeout", "-E", "--conflict-exit-code"), pos: 1},
	"exec":    {argOpts: stringSet("-a")},
	"command": {noCmd: stringSet("-v", "-V")},
	"time":    {},
	"coproc":  {},
}

func stringSet(s ...string) map[string]bool {
	m := map[string]bool{}
	for _, x := range s {
		m[x] = true
	}
	return m
}

// shKeepsCommand are the keywords after which a command word follows. The
// parser takes them as keywords where they belong; at the start of a
// command they are met only where the reading resumed after an error.
var shKeepsCommand = stringSet("if", "then", "else", "elif", "do", "while", "until", "!", "{")

// shBuiltins are bash's builtins and keywords: never programs on PATH.
var shBuiltins = stringSet(strings.Fields(`. : [ alias bg bind break builtin caller cd command compgen complete compopt
	continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs kill
	let local logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt source suspend
	test times trap true type typeset ulimit umask unalias unset wait
	if then else elif fi do done while until for in case esac select function time coproc { } ! [[ ]]`)...)

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isNameByte(c byte) bool {
	return c == '_' || isDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// isAssignment reports whether w starts with NAME=, NAME+= or NAME[...]=.
func isAssignment(w string) bool {
	i := 0
	for i < len(w) && isNameByte(w[i]) {
		i++
	}
	if i == 0 || isDigit(w[0]) || i == len(w) {
		return false
	}
	if w[i] == '[' {
		j := strings.IndexByte(w[i:], ']')
		if j < 0 {
			return false
		}
		i += j + 1
	}
	if i < len(w) && w[i] == '+' {
		i++
	}
	return i < len(w) && w[i] == '='
}

// isProgramName reports whether w is a program name worth looking up: a
// bare name or an absolute path, of plain characters, without "/." in it.
func isProgramName(w string) bool {
	if w == "" || strings.Contains(w, "/.") {
		return false
	}
	abs := w[0] == '/'
	if abs && (len(w) == 1 || w[len(w)-1] == '/') {
		return false
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		switch {
		case isNameByte(c):
		case c == '.' || c == ':' || c == '-' || c == '+' || c == '@':
			if i == 0 {
				return false
			}
		case c == '/':
			if !abs {
				return false
			}
		default:
			return false
		}
	}
	return true
}
