package skills

import (
	"slices"
	"testing"
)

func TestRenderArguments(t *testing.T) {
	tests := []struct {
		name, body, args, want string
	}{
		{"all arguments", "Fix issue $ARGUMENTS now.", "123 urgent", "Fix issue 123 urgent now."},
		{"empty arguments", "Fix issue $ARGUMENTS.", "", "Fix issue ."},
		{"indexed", "from $0 to $1", "a.txt b.txt", "from a.txt to b.txt"},
		{"indexed long form", "from $ARGUMENTS[0] to $ARGUMENTS[1]", "a b", "from a to b"},
		{"quoted argument", "title: $0; rest: $1", `"hello world" x`, "title: hello world; rest: x"},
		{"single quotes keep backslashes", "$0", `'a\b c'`, `a\b c`},
		{"indexed past the end", "[$0][$1][$ARGUMENTS[7]]", "only", "[only][][]"},
		{"no placeholder appends", "Do the thing.\n", "with care", "Do the thing.\n\nARGUMENTS: with care\n"},
		{"no placeholder, no arguments", "Do the thing.\n", "  ", "Do the thing.\n"},
		{"mixed", "$ARGUMENTS | $1", `x "y z"`, `x "y z" | y z`},
		{"multi-digit index", "$10", "0 1 2 3 4 5 6 7 8 9 ten", "ten"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RenderArguments(tt.body, tt.args); got != tt.want {
				t.Errorf("RenderArguments(%q, %q) = %q, want %q", tt.body, tt.args, got, tt.want)
			}
		})
	}
}

func TestSplitArguments(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   ", nil},
		{"a b\tc\n", []string{"a", "b", "c"}},
		{`"a b" c`, []string{"a b", "c"}},
		{`'it''s'`, []string{"its"}},
		{`""`, []string{""}},
		{`a\ b`, []string{"a b"}},
		{`"say \"hi\" \n"`, []string{`say "hi" \n`}},
		{`"unterminated rest`, []string{"unterminated rest"}},
		{`trailing\`, []string{`trailing\`}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := SplitArguments(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("SplitArguments(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzRenderArguments(f *testing.F) {
	f.Add("run $0 with $ARGUMENTS[1] and $ARGUMENTS", `a "b c" 'd'`)
	f.Fuzz(func(t *testing.T, body, args string) {
		_ = RenderArguments(body, args)
		_ = SplitArguments(args)
	})
}
