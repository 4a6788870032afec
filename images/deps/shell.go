package deps

import "strings"

// A small, static reading of shell scripts: which programs a script starts
// by a literal name. It knows enough of the shell's grammar to find command
// words (at the start of a line and after | ; & && || ( $( ` <( and the
// compound keywords, past assignments, redirections and wrappers like env
// or xargs) and to stay out of what is not code (comments, quotes,
// here-documents, [[ ]] tests, case patterns, for lists). It never runs
// anything. Names built at run time ($cmd, "$(which x)") are not seen; a
// construct it misreads costs a finding, not a failure. Scripts are
// untrusted: every loop consumes input, nesting is bounded, and the work is
// linear in the script's size (times the bounded nesting of backquotes).

// ShellCall is a program a shell script starts: its name as written (a
// bare name looked up on PATH, or an absolute path) and the first line
// that starts it.
type ShellCall struct {
	Name string
	Line int
}

// maxShellDepth bounds the nesting of $( ), ` ` and <( ) the tokenizer
// follows; deeper substitutions are skipped whole.
const maxShellDepth = 32

// ShellCalls returns the programs the shell script src starts by a literal
// name, each once, in order of first appearance. Shell builtins and
// keywords, functions the script defines, and paths relative to the working
// directory or the skill (./x, scripts/x.sh) are left out.
func ShellCalls(src []byte) []ShellCall {
	p := &shParser{funcs: map[string]bool{}, seen: map[string]bool{}}
	p.push()
	lx := &shLexer{src: src, line: 1, sink: p.token}
	lx.list(false)
	var out []ShellCall
	for _, c := range p.calls {
		if !p.funcs[c.Name] {
			out = append(out, c)
		}
	}
	return out
}

// Token kinds.
const (
	shWord    = iota
	shOp      // ; & && || | |& ( ) ;; ;& ;;& and newline ("\n")
	shRedir   // a redirection operator: the next word is its target
	shHeredoc // << or <<-: the delimiter and body were consumed
	shOpen    // start of a command substitution or process substitution
	shClose   // its end
)

type shTok struct {
	kind int
	text string // a word's text without quotes (expansions as \x00); an op's text
	lit  bool   // a word with no expansion in it
	line int
}

// shLexer hands each token to sink as it is read (the parser), but for a
// here-document's delimiter, which it keeps (grab).
type shLexer struct {
	src      []byte
	i        int
	line     int
	depth    int
	sink     func(shTok)
	grab     *shTok
	heredocs []shHeredocSpec
}

type shHeredocSpec struct {
	delim string
	tabs  bool
}

func (lx *shLexer) peek(off int) byte {
	if lx.i+off < len(lx.src) {
		return lx.src[lx.i+off]
	}
	return 0
}

func (lx *shLexer) emit(kind int, text string, lit bool, line int) {
	t := shTok{kind: kind, text: text, lit: lit, line: line}
	if lx.grab != nil && kind == shWord {
		*lx.grab, lx.grab = t, nil
		return
	}
	lx.sink(t)
}

// list lexes commands until the end of input or, inside a substitution
// (sub), the ) that closes it (consumed).
func (lx *shLexer) list(sub bool) {
	parens := 0
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			lx.i++
		case c == '\\' && lx.peek(1) == '\n':
			lx.i += 2
			lx.line++
		case c == '#':
			for lx.i < len(lx.src) && lx.src[lx.i] != '\n' {
				lx.i++
			}
		case c == '\n':
			lx.emit(shOp, "\n", true, lx.line)
			lx.i++
			lx.line++
			lx.readHeredocs()
		case c == '(' && lx.peek(1) == '(':
			// An arithmetic command: (( ... )), no commands inside.
			line := lx.line
			lx.skipBalanced('(', ')')
			lx.emit(shWord, "\x00", false, line)
		case c == '(':
			parens++
			lx.emit(shOp, "(", true, lx.line)
			lx.i++
		case c == ')':
			lx.i++
			if parens == 0 && sub {
				return
			}
			if parens > 0 {
				parens--
			}
			lx.emit(shOp, ")", true, lx.line)
		case c == ';' || c == '&' || c == '|':
			lx.operator()
		case c == '<' || c == '>':
			lx.redirection()
		default:
			lx.word()
		}
	}
}

// operator lexes one of ; ;; ;& ;;& & && &> &>> | || |&.
func (lx *shLexer) operator() {
	line := lx.line
	for _, op := range []string{";;&", ";;", ";&", ";", "&&", "&>>", "&>", "&", "||", "|&", "|"} {
		if strings.HasPrefix(string(lx.src[lx.i:min(len(lx.src), lx.i+3)]), op) {
			lx.i += len(op)
			if op == "&>" || op == "&>>" {
				lx.emit(shRedir, op, true, line)
			} else {
				lx.emit(shOp, op, true, line)
			}
			return
		}
	}
	lx.i++ // not reached: c is one of ;&|
}

// redirection lexes < > and their forms, here-documents and process
// substitution.
func (lx *shLexer) redirection() {
	line := lx.line
	rest := string(lx.src[lx.i:min(len(lx.src), lx.i+3)])
	switch {
	case strings.HasPrefix(rest, "<("), strings.HasPrefix(rest, ">("):
		lx.i += 2
		lx.substitution(line)
	case strings.HasPrefix(rest, "<<<"):
		lx.i += 3
		lx.emit(shRedir, "<<<", true, line)
	case strings.HasPrefix(rest, "<<"):
		lx.i += 2
		tabs := lx.peek(0) == '-'
		if tabs {
			lx.i++
		}
		for lx.peek(0) == ' ' || lx.peek(0) == '\t' {
			lx.i++
		}
		// The delimiter is a word with its quotes removed; it is not a
		// token of its own.
		var d shTok
		lx.grab = &d
		lx.word()
		if lx.grab == nil {
			lx.heredocs = append(lx.heredocs, shHeredocSpec{delim: d.text, tabs: tabs})
		}
		lx.grab = nil
		lx.emit(shHeredoc, "<<", true, line)
	default:
		n := 1
		for _, op := range []string{">>", ">&", ">|", "<&", "<>"} {
			if strings.HasPrefix(rest, op) {
				n = 2
				break
			}
		}
		lx.i += n
		if (n == 2 && (rest[1] == '&')) && (lx.peek(0) == '-' || isDigit(lx.peek(0))) {
			// >&2, <&0, >&-: a descriptor, not a file word.
			for isDigit(lx.peek(0)) || lx.peek(0) == '-' {
				lx.i++
			}
			return
		}
		lx.emit(shRedir, rest[:n], true, line)
	}
}

// readHeredocs skips the bodies of the here-documents started on the line
// just ended.
func (lx *shLexer) readHeredocs() {
	pending := lx.heredocs
	lx.heredocs = nil
	for _, h := range pending {
		for lx.i < len(lx.src) {
			end := lx.i
			for end < len(lx.src) && lx.src[end] != '\n' {
				end++
			}
			l := string(lx.src[lx.i:end])
			if h.tabs {
				l = strings.TrimLeft(l, "\t")
			}
			l = strings.TrimSuffix(l, "\r")
			lx.i = end
			if lx.i < len(lx.src) {
				lx.i++
				lx.line++
			}
			if l == h.delim {
				break
			}
		}
	}
}

// substitution lexes the body of $( or <( up to its ), between an open
// and a close token; past maxShellDepth it skips the body.
func (lx *shLexer) substitution(line int) {
	if lx.depth >= maxShellDepth {
		lx.skipBalanced('(', ')')
		return
	}
	lx.emit(shOpen, "(", true, line)
	lx.depth++
	lx.list(true)
	lx.depth--
	lx.emit(shClose, ")", true, lx.line)
}

// backquote lexes `...` (lx.i just past the opening quote): its body, with
// the backslashes the shell removes there removed, is lexed as a script of
// its own.
func (lx *shLexer) backquote() {
	line := lx.line
	var body []byte
	for lx.i < len(lx.src) && lx.src[lx.i] != '`' {
		c := lx.src[lx.i]
		if c == '\\' && lx.i+1 < len(lx.src) {
			if n := lx.src[lx.i+1]; n == '`' || n == '\\' || n == '$' {
				body = append(body, n)
				lx.i += 2
				continue
			}
		}
		if c == '\n' {
			lx.line++
		}
		body = append(body, c)
		lx.i++
	}
	lx.i++ // the closing quote (or past the end)
	if lx.depth >= maxShellDepth {
		return
	}
	lx.emit(shOpen, "`", true, line)
	sub := &shLexer{src: body, line: line, depth: lx.depth + 1, sink: lx.sink}
	sub.list(false)
	lx.emit(shClose, "`", true, lx.line)
}

// skipBalanced skips to just past the close that balances the open at
// lx.i, or to the end; quotes are skipped whole.
func (lx *shLexer) skipBalanced(open, close byte) {
	depth := 0
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		lx.i++
		switch c {
		case '\n':
			lx.line++
		case '\\':
			if lx.i < len(lx.src) {
				if lx.src[lx.i] == '\n' {
					lx.line++
				}
				lx.i++
			}
		case '\'', '"':
			for lx.i < len(lx.src) && lx.src[lx.i] != c {
				if lx.src[lx.i] == '\\' && c == '"' {
					lx.i++
				} else if lx.src[lx.i] == '\n' {
					lx.line++
				}
				lx.i++
			}
			lx.i++
		case open:
			depth++
		case close:
			depth--
			if depth <= 0 {
				return
			}
		}
	}
}

// word lexes one word: quotes, escapes and expansions, up to an unquoted
// blank or operator character.
func (lx *shLexer) word() {
	line := lx.line
	var b strings.Builder
	lit := true
	start := lx.i
loop:
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		switch c {
		case ' ', '\t', '\r', '\n', ';', '&', '|', '<', '>':
			break loop
		case '(':
			// name=(array) and the extglob forms @( ) !( ) +( ) *( ) ?( )
			// belong to the word; any other ( ends it.
			if s := b.String(); s != "" && strings.ContainsAny(s[len(s)-1:], "=@!+*?") {
				lx.skipBalanced('(', ')')
				lit = false
				b.WriteByte(0)
				continue
			}
			break loop
		case ')':
			break loop
		case '\\':
			if lx.peek(1) == '\n' {
				lx.i += 2
				lx.line++
				continue
			}
			if lx.i+1 < len(lx.src) {
				b.WriteByte(lx.src[lx.i+1])
				lx.i += 2
				continue
			}
			lx.i++
		case '\'':
			lx.i++
			for lx.i < len(lx.src) && lx.src[lx.i] != '\'' {
				if lx.src[lx.i] == '\n' {
					lx.line++
				}
				b.WriteByte(lx.src[lx.i])
				lx.i++
			}
			lx.i++
		case '"':
			lx.i++
			if !lx.doubleQuoted(&b) {
				lit = false
			}
		case '`':
			lx.i++
			lx.backquote()
			lit = false
			b.WriteByte(0)
		case '$':
			lx.dollar()
			lit = false
			b.WriteByte(0)
		default:
			b.WriteByte(c)
			lx.i++
		}
	}
	if lx.i == start {
		return // nothing here is a word (list never calls word at such a character)
	}
	s := b.String()
	if lit && s != "" && isDigits(s) && (lx.peek(0) == '<' || lx.peek(0) == '>') {
		return // 2>file: the descriptor of a redirection
	}
	lx.emit(shWord, s, lit, line)
}

// doubleQuoted lexes the inside of "..." (lx.i past the opening quote)
// into b; it reports whether the text was literal.
func (lx *shLexer) doubleQuoted(b *strings.Builder) bool {
	lit := true
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		switch c {
		case '"':
			lx.i++
			return lit
		case '\\':
			if n := lx.peek(1); n == '"' || n == '\\' || n == '$' || n == '`' {
				b.WriteByte(n)
				lx.i += 2
				continue
			} else if n == '\n' {
				lx.i += 2
				lx.line++
				continue
			}
			b.WriteByte(c)
			lx.i++
		case '`':
			lx.i++
			lx.backquote()
			lit = false
			b.WriteByte(0)
		case '$':
			lx.dollar()
			lit = false
			b.WriteByte(0)
		default:
			if c == '\n' {
				lx.line++
			}
			b.WriteByte(c)
			lx.i++
		}
	}
	return lit
}

// dollar lexes an expansion at lx.i ('$'): $(( )), $( ), ${ }, $'...',
// $name and the special parameters.
func (lx *shLexer) dollar() {
	line := lx.line
	lx.i++
	switch c := lx.peek(0); {
	case c == '(' && lx.peek(1) == '(':
		lx.skipBalanced('(', ')')
	case c == '(':
		lx.i++
		lx.substitution(line)
	case c == '{':
		lx.skipBalanced('{', '}')
	case c == '\'':
		lx.i++
		for lx.i < len(lx.src) && lx.src[lx.i] != '\'' {
			if lx.src[lx.i] == '\\' {
				lx.i++
			} else if lx.src[lx.i] == '\n' {
				lx.line++
			}
			lx.i++
		}
		lx.i++
	case isNameByte(c):
		for isNameByte(lx.peek(0)) {
			lx.i++
		}
	case c != 0 && strings.IndexByte("@*#?-$!0123456789", c) >= 0:
		lx.i++
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isDigits(s string) bool { return strings.Trim(s, "0123456789") == "" }

func isNameByte(c byte) bool {
	return c == '_' || isDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// shParser walks the tokens with a little state per nesting level.
type shParser struct {
	stack []*shState
	calls []ShellCall // each program once, at its first call
	seen  map[string]bool
	funcs map[string]bool
}

type shState struct {
	cmdPos    bool  // the next word is a command word
	redir     bool  // the next word is a redirection's target
	inTest    bool  // inside [[ ]]
	funcName  bool  // the next word names a function (after "function")
	cases     []int // open case statements: caseWord, caseIn, casePattern, caseBody
	wrap      *shWrapper
	wrapSkip  bool   // the wrapper's next word is an option's value
	wrapPos   int    // positional words the wrapper still takes (timeout's duration)
	lastCall  string // the program of the call just seen
	lastWasIt bool   // the previous token was that call's word
	afterFunc bool   // a name ( ) was just seen: the body follows
}

const (
	caseWord = iota
	caseIn
	casePattern
	caseBody
)

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

// shBuiltins are bash's builtins and keywords: never programs on PATH.
var shBuiltins = stringSet(strings.Fields(`. : [ alias bg bind break builtin caller cd command compgen complete compopt
	continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs kill
	let local logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt source suspend
	test times trap true type typeset ulimit umask unalias unset wait
	if then else elif fi do done while until for in case esac select function time coproc { } ! [[ ]]`)...)

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

func (p *shParser) push() {
	p.stack = append(p.stack, &shState{cmdPos: true})
}

func (p *shParser) top() *shState { return p.stack[len(p.stack)-1] }

func (p *shParser) token(t shTok) {
	switch t.kind {
	case shOpen:
		p.top().lastWasIt = false
		p.push()
		return
	case shClose:
		if len(p.stack) > 1 {
			p.stack = p.stack[:len(p.stack)-1]
		}
		return
	}
	s := p.top()
	wasIt := s.lastWasIt
	s.lastWasIt = false
	if s.inTest {
		if t.kind == shWord && t.text == "]]" && t.lit {
			s.inTest = false
		}
		return
	}
	switch t.kind {
	case shHeredoc:
		return
	case shRedir:
		s.redir = true
		return
	case shOp:
		p.op(s, t, wasIt)
		return
	}
	// A word.
	if s.redir {
		s.redir = false
		return
	}
	if s.funcName {
		s.funcName = false
		p.funcs[t.text] = true
		s.cmdPos = true // the body follows (after an optional "()")
		s.afterFunc = true
		return
	}
	if n := len(s.cases); n > 0 {
		switch s.cases[n-1] {
		case caseWord:
			s.cases[n-1] = caseIn
			return
		case caseIn:
			s.cases[n-1] = casePattern // "in" (or "{" in old shells)
			return
		case casePattern:
			if t.lit && t.text == "esac" {
				s.cases = s.cases[:n-1]
				s.cmdPos = false
			}
			return
		}
	}
	if !s.cmdPos {
		if s.wrap != nil {
			p.wrapped(s, t)
		}
		return
	}
	p.command(s, t)
}

func (p *shParser) op(s *shState, t shTok, wasIt bool) {
	s.wrap, s.redir = nil, false
	switch t.text {
	case "(":
		if wasIt && s.lastCall != "" {
			// name ( ): a function definition, not a call.
			p.funcs[s.lastCall] = true
			s.afterFunc = true
			s.cmdPos = false
			return
		}
		if n := len(s.cases); n > 0 && s.cases[n-1] == casePattern {
			return // the optional ( before a case pattern
		}
		s.cmdPos = true
	case ")":
		if n := len(s.cases); n > 0 && s.cases[n-1] == casePattern {
			s.cases[n-1] = caseBody
			s.cmdPos = true
			return
		}
		s.cmdPos = s.afterFunc
		s.afterFunc = false
	case ";;", ";&", ";;&":
		if n := len(s.cases); n > 0 {
			s.cases[n-1] = casePattern
		}
		s.cmdPos = false
	case "|":
		if n := len(s.cases); n > 0 && s.cases[n-1] == casePattern {
			return // pattern alternatives
		}
		s.cmdPos = true
	default: // newline ; & && || |&
		if n := len(s.cases); n > 0 && s.cases[n-1] != caseBody {
			return // a newline between case patterns
		}
		s.cmdPos = true
	}
}

// command handles a word in command position.
func (p *shParser) command(s *shState, t shTok) {
	w := t.text
	if isAssignment(w) {
		return // VAR=value cmd: still in command position
	}
	s.afterFunc = false
	if !t.lit {
		s.cmdPos = false
		return
	}
	switch w {
	case "if", "then", "else", "elif", "do", "while", "until", "!", "{":
		return
	case "fi", "done", "}", "esac":
		if w == "esac" && len(s.cases) > 0 {
			s.cases = s.cases[:len(s.cases)-1]
		}
		s.cmdPos = false
		return
	case "for", "select":
		s.cmdPos = false
		return
	case "case":
		s.cases = append(s.cases, caseWord)
		s.cmdPos = false
		return
	case "[[":
		s.inTest = true
		s.cmdPos = false
		return
	case "function":
		s.funcName = true
		s.cmdPos = false
		return
	}
	if wr, ok := shWrappers[w]; ok {
		if wr.program {
			p.call(s, t)
		}
		s.cmdPos = false
		s.wrap, s.wrapSkip, s.wrapPos = wr, false, wr.pos
		return
	}
	s.cmdPos = false
	if shBuiltins[w] {
		return
	}
	p.call(s, t)
}

// wrapped handles a word after a wrapper command (env, xargs, exec, ...):
// its options and their values, then the command it runs.
func (p *shParser) wrapped(s *shState, t shTok) {
	wr := s.wrap
	w := t.text
	switch {
	case s.wrapSkip:
		s.wrapSkip = false
	case wr.noCmd[w]:
		s.wrap = nil
	case strings.HasPrefix(w, "-") && len(w) > 1:
		if w == "--" {
			return
		}
		s.wrapSkip = wr.argOpts[w]
	case wr == shWrappers["env"] && isAssignment(w):
	case s.wrapPos > 0:
		s.wrapPos--
	default:
		s.wrap = nil
		s.cmdPos = true
		p.command(s, t)
	}
}

func (p *shParser) call(s *shState, t shTok) {
	name := t.text
	if !isProgramName(name) {
		return
	}
	if !p.seen[name] {
		p.seen[name] = true
		p.calls = append(p.calls, ShellCall{Name: name, Line: t.line})
	}
	s.lastCall = name
	s.lastWasIt = true
}
