package runtime

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestValidateInputName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		why  string // part of the error
	}{
		{"in.txt", true, ""},
		{"unpacked/ppt/presentation.xml", true, ""},
		{"outputs/seed.txt", true, ""},
		{"..data", true, ""},
		{"a b/ünï çødé", true, ""},
		{strings.Repeat("d/", MaxInputDepth-1) + "f", true, ""},
		{"", false, "empty"},
		{"/etc/passwd", false, "absolute"},
		{"..", false, `".."`},
		{"a/../b", false, `".."`},
		{"a/..", false, `".."`},
		{".", false, `"."`},
		{"./a", false, `"."`},
		{"a//b", false, "empty path component"},
		{"a/", false, "empty path component"},
		{"a\x00b", false, "control character"},
		{"a\nb", false, "control character"},
		{"a\x1b[31m", false, "control character"},
		{"a\u0085b", false, "control character"},
		{"a\x7f", false, "control character"},
		{"\xff\xfe", false, "UTF-8"},
		{strings.Repeat("n", 256), false, "component of 256 bytes"},
		{strings.Repeat("d/", MaxInputDepth) + "f", false, "levels deep"},
		{strings.Repeat("abcdefgh/", 120), false, "bytes long"},
	} {
		t.Run(strings.ToValidUTF8(tc.name, "?"), func(t *testing.T) {
			err := ValidateInputName(tc.name)
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("err %v, want ErrInvalidJob mentioning %q", err, tc.why)
			}
			if strings.ContainsAny(err.Error(), "\x00\n\x1b") {
				t.Errorf("error shows the raw name: %q", err)
			}
		})
	}
}

func TestValidateInputs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []InputFile
		why   string // "" = valid
	}{
		{"tree", []InputFile{
			{Name: "d", Kind: InputDir, Mode: 0o700},
			{Name: "d/e/f.txt", Data: []byte("x")},
			{Name: "empty", Kind: InputDir},
			{Name: "d/link", Kind: InputSymlink, Target: "../../etc/passwd"},
			{Name: "outputs", Kind: InputDir},
			{Name: "outputs/seed", Data: []byte("s")},
		}, ""},
		{"file then child", []InputFile{{Name: "a"}, {Name: "a/b"}}, `"a/b" lies under "a", which is a file`},
		{"child then file", []InputFile{{Name: "a/b/c"}, {Name: "a"}}, `"a/b/c" lies under "a", which is a file`},
		{"link then child", []InputFile{{Name: "x/l", Kind: InputSymlink, Target: "/"}, {Name: "x/l/etc/cron.d/evil"}}, `lies under "x/l", which is a symlink`},
		{"twice", []InputFile{{Name: "a/b"}, {Name: "a/b", Kind: InputDir}}, "given twice"},
		{"outputs file", []InputFile{{Name: "outputs"}}, "reserved"},
		{"outputs link", []InputFile{{Name: "outputs", Kind: InputSymlink, Target: "/etc"}}, "reserved"},
		{"link data", []InputFile{{Name: "l", Kind: InputSymlink, Target: "x", Data: []byte("d")}}, "cannot have data"},
		{"link nul", []InputFile{{Name: "l", Kind: InputSymlink, Target: "x\x00y"}}, "NUL"},
		{"link long", []InputFile{{Name: "l", Kind: InputSymlink, Target: strings.Repeat("t", MaxInputTargetSize+1)}}, "link target"},
		{"file target", []InputFile{{Name: "f", Target: "x"}}, "cannot have a link target"},
		{"dir mode", []InputFile{{Name: "d", Kind: InputDir, Mode: 0o1777}}, "only permission bits"},
		{"too big", []InputFile{{Name: "a", Data: make([]byte, 6)}, {Name: "b/c", Data: make([]byte, 5)}}, "over the 10-byte workdir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateInputs(tc.files, 10)
			if tc.why == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("err %v, want one mentioning %q", err, tc.why)
			}
		})
	}
}

// FuzzValidateInputName: whatever a caller sends, an accepted name is a
// confined, printable relative path that stays inside the workdir.
func FuzzValidateInputName(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "/x", "a//b", "a\x00", ".", "d/./e", "ü/ß", "a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateInputName(name)
		if err != nil {
			if !errors.Is(err, ErrInvalidJob) {
				t.Fatalf("error %v does not wrap ErrInvalidJob", err)
			}
			return
		}
		if !filepath.IsLocal(name) || filepath.Clean(name) != name || strings.HasPrefix(name, "/") {
			t.Fatalf("accepted %q, which is not a clean local path", name)
		}
		if !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0 {
			t.Fatalf("accepted %q with control characters or bad UTF-8", name)
		}
		if len(name) > MaxInputPathBytes || strings.Count(name, "/")+1 > MaxInputDepth {
			t.Fatalf("accepted %q over the bounds", name)
		}
		for _, c := range strings.Split(name, "/") {
			if c == "" || c == "." || c == ".." || len(c) > 255 {
				t.Fatalf("accepted %q with component %q", name, c)
			}
		}
	})
}
