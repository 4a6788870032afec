package skills

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		name    string
		wantErr string // substring; empty = valid
	}{
		{"pdf", ""},
		{"pdf-tools", ""},
		{"a", ""},
		{"abc123", ""},
		{"1st-skill", ""},
		{"навык", ""},
		{"技能", ""},
		{"café", ""},       // precomposed
		{"cafe\u0301", ""}, // decomposed: NFKC composes it
		{"ｐｄｆ", ""},        // fullwidth letters: NFKC gives "pdf"
		{"x²", ""},         // superscript two: NFKC gives "x2"
		{strings.Repeat("a", 64), ""},
		{strings.Repeat("я", 64), ""}, // 64 characters, 128 bytes
		{strings.Repeat("a", 65), "65 characters, at most 64"},
		{"", "must not be empty"},
		{"НАВЫК", "must be lowercase"},
		{"PDF", "must be lowercase"},
		{"Pdf-Tools", "must be lowercase (has P T)"},
		{"-pdf", "must not start or end with a hyphen"},
		{"pdf-", "must not start or end with a hyphen"},
		{"pdf--tools", "consecutive hyphens"},
		{"pdf_tools", `has '_'`},
		{"pdf tools", `has ' '`},
		{"pdf.tools", `has '.'`},
		{"..", "not paths"},
		{".", "not paths"},
		{"../etc", "not paths"},
		{"a/b", "not paths"},
		{"a\\b", "not paths"},
		{"a\x00b", "not paths"},
		{"caf\xe9", "not valid UTF-8"},
		{"emoji-😀", `has '😀'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidName(tt.name)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidName(%q) = %v, want nil", tt.name, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidName(%q) = nil, want error containing %q", tt.name, tt.wantErr)
			}
			if !errors.Is(err, ErrBadName) {
				t.Errorf("error does not wrap ErrBadName: %v", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestNFKCEquality(t *testing.T) {
	if NormalizeName("café") != NormalizeName("cafe\u0301") {
		t.Fatal("precomposed and decomposed café differ after NFKC")
	}
}

func TestLoadDirFixtures(t *testing.T) {
	tests := []struct {
		dir        string
		opts       LoadOptions
		wantFields []string // fields named by errors, in order; nil = valid
		check      func(t *testing.T, s *Skill)
	}{
		{
			dir: "valid/full-skill",
			check: func(t *testing.T, s *Skill) {
				if s.Name != "full-skill" || s.License != "Apache-2.0" || !strings.HasPrefix(s.Compatibility, "Requires python3") {
					t.Errorf("skill = %+v", s)
				}
				wantMeta := map[string]string{"author": "skillbox", "version": "1.0", "count": "3", "enabled": "true", "released": "2024-01-02"}
				if !reflect.DeepEqual(s.Metadata, wantMeta) {
					t.Errorf("metadata = %v, want %v", s.Metadata, wantMeta)
				}
				wantTools := []string{"Bash(git status:*)", "Read", "Grep"}
				if !reflect.DeepEqual(s.AllowedTools, wantTools) {
					t.Errorf("allowed-tools = %q, want %q", s.AllowedTools, wantTools)
				}
				if !strings.HasPrefix(s.Body, "# Full skill") {
					t.Errorf("body = %q", s.Body)
				}
				if !filepath.IsAbs(s.Location) || filepath.Base(s.Location) != "SKILL.md" || filepath.Dir(s.Location) != s.Dir {
					t.Errorf("location = %q, dir = %q", s.Location, s.Dir)
				}
				if !strings.HasPrefix(s.Digest, "sha256:") || len(s.Digest) != 71 {
					t.Errorf("digest = %q", s.Digest)
				}
				if s.Properties["allowed-tools"] != "Bash(git status:*) Read Grep" {
					t.Errorf("properties keep allowed-tools as written: %#v", s.Properties["allowed-tools"])
				}
			},
		},
		{
			dir: "valid/list-tools",
			check: func(t *testing.T, s *Skill) {
				want := []string{"Read", "Bash(python3:*)", "skills.run_script"}
				if !reflect.DeepEqual(s.AllowedTools, want) {
					t.Errorf("allowed-tools = %q, want %q", s.AllowedTools, want)
				}
			},
		},
		{dir: "valid/навык", check: func(t *testing.T, s *Skill) {
			if s.Name != "навык" {
				t.Errorf("name = %q", s.Name)
			}
		}},
		{dir: "valid/技能"},
		{dir: "valid/café", check: func(t *testing.T, s *Skill) {
			if s.Name != "café" || len(s.Name) != len("caf\u00e9") {
				t.Errorf("name %q is not the NFKC (precomposed) form", s.Name)
			}
		}},
		{
			dir:  "valid/with-extensions",
			opts: LoadOptions{AllowExtensions: true},
			check: func(t *testing.T, s *Skill) {
				if !s.DisableModelInvocation {
					t.Error("disable-model-invocation not set")
				}
				if !reflect.DeepEqual(s.Tags, []string{"ops", "deploy"}) || !reflect.DeepEqual(s.Requires, []string{"full-skill"}) {
					t.Errorf("tags = %q, requires = %q", s.Tags, s.Requires)
				}
			},
		},
		{
			dir:        "valid/with-extensions",
			wantFields: []string{"user-invocable", "disable-model-invocation", "context", "agent", "model", "argument-hint", "hooks", "version", "triggers", "portable", "tags", "requires"},
		},
		{
			dir:  "valid/with-extensions",
			opts: LoadOptions{Lenient: true},
			check: func(t *testing.T, s *Skill) {
				if len(s.Warnings) != 12 || !s.DisableModelInvocation {
					t.Errorf("lenient load: warnings = %q, dmi = %v", s.Warnings, s.DisableModelInvocation)
				}
			},
		},
		{dir: "invalid/missing-name", wantFields: []string{"name"}},
		{dir: "invalid/НАВЫК", wantFields: []string{"name"}},
		{dir: "invalid/name-mismatch", wantFields: []string{"name"}},
		{dir: "invalid/unknown-fields", wantFields: []string{"author", "priority"}},
		{dir: "invalid/unknown-fields", opts: LoadOptions{AllowExtensions: true}, wantFields: []string{"author", "priority"}},
		{
			dir:        "invalid/many-problems",
			wantFields: []string{"description", "name", "name", "compatibility", "metadata.nested", "allowed-tools", "license"},
		},
		// Unusable even when lenient (no description); every problem is
		// still reported, the name's as one warning since the directory's
		// name would do.
		{dir: "invalid/many-problems", opts: LoadOptions{Lenient: true}, wantFields: []string{"description", "name", "compatibility", "metadata.nested", "allowed-tools", "license"}},
		{
			dir:  "invalid/name-mismatch",
			opts: LoadOptions{Lenient: true},
			check: func(t *testing.T, s *Skill) {
				// Known by its directory's name only: the frontmatter
				// cannot claim another skill's name.
				if s.Name != "name-mismatch" || len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "indexed under the directory name") {
					t.Errorf("name = %q, warnings = %q", s.Name, s.Warnings)
				}
			},
		},
		// A valid name in a directory whose name is not valid cannot be
		// indexed under either.
		{dir: "invalid/Dir_Name", wantFields: []string{"name"}},
		{dir: "invalid/Dir_Name", opts: LoadOptions{Lenient: true}, wantFields: []string{"name"}},
		{dir: "invalid/bad-yaml", wantFields: []string{"SKILL.md"}},
		{dir: "invalid/no-fence", wantFields: []string{"SKILL.md"}},
		{dir: "does-not-exist", wantFields: []string{"SKILL.md"}},
	}
	for _, tt := range tests {
		name := tt.dir
		if tt.opts.AllowExtensions {
			name += "/extensions"
		}
		if tt.opts.Lenient {
			name += "/lenient"
		}
		t.Run(name, func(t *testing.T) {
			s, err := LoadDir(filepath.Join("testdata", tt.dir), tt.opts)
			if tt.wantFields == nil {
				if err != nil {
					t.Fatalf("LoadDir: %v", err)
				}
				if tt.check != nil {
					tt.check(t, s)
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadDir succeeded, want errors for %v", tt.wantFields)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			var verrs ValidationErrors
			if !errors.As(err, &verrs) {
				t.Fatalf("error is not ValidationErrors: %T %v", err, err)
			}
			var got []string
			for _, e := range verrs {
				got = append(got, e.Field)
				if e.Message == "" {
					t.Errorf("empty message for %s", e.Field)
				}
			}
			if !reflect.DeepEqual(got, tt.wantFields) {
				t.Errorf("fields = %q, want %q\n%v", got, tt.wantFields, err)
			}
		})
	}
}

// TestValidationRules covers each rule with inline documents; the directory
// is created with the name the case needs.
func TestValidationRules(t *testing.T) {
	tests := []struct {
		name    string
		dir     string
		fm      string
		opts    LoadOptions
		wantErr []string // substrings that must all appear; nil = valid
		// For a valid skill: its name, and a warning it must carry.
		wantName, wantWarn string
	}{
		{name: "description 1024 chars", dir: "d", fm: "name: d\ndescription: " + strings.Repeat("x", 1024)},
		{name: "description 1024 multibyte chars", dir: "d", fm: "name: d\ndescription: " + strings.Repeat("ж", 1024)},
		{name: "description 1025 chars", dir: "d", fm: "name: d\ndescription: " + strings.Repeat("x", 1025), wantErr: []string{"description", "1025 characters, at most 1024"}},
		{name: "description empty", dir: "d", fm: "name: d\ndescription: \"\"", wantErr: []string{"description: must not be empty"}},
		{name: "description blank", dir: "d", fm: "name: d\ndescription: \"   \"", wantErr: []string{"description: must not be empty"}},
		{name: "description missing", dir: "d", fm: "name: d", wantErr: []string{"description: is required"}},
		{name: "description not a string", dir: "d", fm: "name: d\ndescription: [a]", wantErr: []string{"description: must be a string, found a list"}},
		{name: "name number", dir: "123", fm: "name: 123\ndescription: x", wantErr: []string{`name "123": must be a string, found a number`}},
		{name: "name quoted number", dir: "123", fm: "name: \"123\"\ndescription: x"},
		{name: "name too long", dir: strings.Repeat("a", 65), fm: "name: " + strings.Repeat("a", 65) + "\ndescription: x", wantErr: []string{"at most 64"}},
		{name: "name uppercase", dir: "Abc", fm: "name: Abc\ndescription: x", wantErr: []string{`name "Abc": must be lowercase`}},
		{name: "name cyrillic uppercase", dir: "НАВЫК", fm: "name: НАВЫК\ndescription: x", wantErr: []string{`name "НАВЫК": must be lowercase`}},
		{name: "name leading hyphen", dir: "-a", fm: "name: -a\ndescription: x", wantErr: []string{"start or end with a hyphen"}},
		{name: "name double hyphen", dir: "a--b", fm: "name: a--b\ndescription: x", wantErr: []string{"consecutive hyphens"}},
		{name: "name mismatch", dir: "abc", fm: "name: abd\ndescription: x", wantErr: []string{`name "abd": must equal the directory name "abc"`}},
		{name: "name decomposed vs dir precomposed", dir: "caf\u00e9", fm: "name: \"cafe\u0301\"\ndescription: x"},
		{name: "name precomposed vs dir decomposed", dir: "cafe\u0301", fm: "name: caf\u00e9\ndescription: x"},
		{name: "name fullwidth vs dir ascii", dir: "pdf", fm: "name: ｐｄｆ\ndescription: x"},
		{name: "compatibility 500", dir: "d", fm: "name: d\ndescription: x\ncompatibility: " + strings.Repeat("c", 500)},
		{name: "compatibility 501", dir: "d", fm: "name: d\ndescription: x\ncompatibility: " + strings.Repeat("c", 501), wantErr: []string{"501 characters, at most 500"}},
		{name: "compatibility empty", dir: "d", fm: "name: d\ndescription: x\ncompatibility: ''", wantErr: []string{"compatibility: must not be empty"}},
		{name: "license not a string", dir: "d", fm: "name: d\ndescription: x\nlicense: {a: b}", wantErr: []string{"license: must be a string"}},
		{name: "metadata list", dir: "d", fm: "name: d\ndescription: x\nmetadata: [a]", wantErr: []string{"metadata: must be a mapping"}},
		{name: "metadata nested", dir: "d", fm: "name: d\ndescription: x\nmetadata:\n  a: {b: c}", wantErr: []string{"metadata.a: must be a string, found a mapping"}},
		{name: "allowed-tools empty string", dir: "d", fm: "name: d\ndescription: x\nallowed-tools: ''"},
		{name: "allowed-tools number", dir: "d", fm: "name: d\ndescription: x\nallowed-tools: 3", wantErr: []string{`allowed-tools "3": must be a list of strings`}},
		{name: "allowed-tools list item number", dir: "d", fm: "name: d\ndescription: x\nallowed-tools: [Read, 3]", wantErr: []string{`allowed-tools[1] "3": must be a non-empty string`}},
		{name: "allowed-tools unbalanced", dir: "d", fm: "name: d\ndescription: x\nallowed-tools: Bash(git:*", wantErr: []string{"unbalanced parentheses"}},
		{name: "unknown field strict", dir: "d", fm: "name: d\ndescription: x\nfoo: 1\nbar: 2", wantErr: []string{"foo: unknown field", "bar: unknown field"}},
		{name: "extension field strict", dir: "d", fm: "name: d\ndescription: x\ntags: [a]", wantErr: []string{"tags: is an extension field", "--allow-extensions"}},
		{name: "extension field allowed", dir: "d", fm: "name: d\ndescription: x\ntags: [a]", opts: LoadOptions{AllowExtensions: true}},
		{name: "extension wrong type", dir: "d", fm: "name: d\ndescription: x\ndisable-model-invocation: \"yes\"", opts: LoadOptions{AllowExtensions: true}, wantErr: []string{`disable-model-invocation "yes": must be true or false`}},
		{name: "requires bad name", dir: "d", fm: "name: d\ndescription: x\nrequires: [../x]", opts: LoadOptions{AllowExtensions: true}, wantErr: []string{`requires "../x": is not a valid skill name`}},
		{name: "all errors collected", dir: "d", fm: "name: D\ncompatibility: ''\nfoo: 1", wantErr: []string{"description: is required", "name \"D\": must be lowercase", "compatibility", "foo: unknown field"}},
		{name: "lenient keeps usable skill", dir: "d", fm: "name: e\ndescription: x\nfoo: 1\ncompatibility: ''", opts: LoadOptions{Lenient: true}},
		{name: "lenient still refuses bad name", dir: "d", fm: "name: ../d\ndescription: x", opts: LoadOptions{Lenient: true}, wantErr: []string{"not paths"}},
		{name: "lenient indexes a cosmetic bad name under the directory", dir: "getting-started", fm: "name: Getting Started_with Skills\ndescription: x", opts: LoadOptions{Lenient: true},
			wantName: "getting-started", wantWarn: "indexed under the directory name"},
		{name: "lenient indexes a nameless skill under the directory", dir: "no-name", fm: "description: x", opts: LoadOptions{Lenient: true},
			wantName: "no-name", wantWarn: "is missing"},
		{name: "lenient refuses a bad name when the directory's is bad too", dir: "Bad Dir", fm: "name: Bad Name\ndescription: x", opts: LoadOptions{Lenient: true}, wantErr: []string{"must be lowercase"}},
		{name: "strict refuses a nameless skill", dir: "no-name", fm: "description: x", wantErr: []string{"name: is required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tt.dir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\n"+tt.fm+"\n---\nbody\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := LoadDir(dir, tt.opts)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("LoadDir: %v", err)
				}
				if s.Name == "" || s.Description == "" {
					t.Errorf("skill = %+v", s)
				}
				if tt.wantName != "" && s.Name != tt.wantName {
					t.Errorf("name = %q, want %q", s.Name, tt.wantName)
				}
				if tt.wantWarn != "" && !strings.Contains(strings.Join(s.Warnings, "\n"), tt.wantWarn) {
					t.Errorf("warnings %q lack %q", s.Warnings, tt.wantWarn)
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadDir succeeded, want %q", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", clip(err.Error(), 300), want)
				}
			}
		})
	}
}

func TestLoadDirRefusesUnsafeSkillFile(t *testing.T) {
	t.Run("SKILL.md symlink outside", func(t *testing.T) {
		base := t.TempDir()
		outside := filepath.Join(base, "outside.md")
		os.WriteFile(outside, []byte("---\nname: s\ndescription: x\n---\n"), 0o644)
		dir := filepath.Join(base, "s")
		os.Mkdir(dir, 0o755)
		os.Symlink(outside, filepath.Join(dir, "SKILL.md"))
		_, err := LoadDir(dir, LoadOptions{})
		if !errors.Is(err, ErrEscape) {
			t.Fatalf("err = %v, want ErrEscape", err)
		}
	})
	t.Run("SKILL.md is a directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "s")
		os.MkdirAll(filepath.Join(dir, "SKILL.md"), 0o755)
		_, err := LoadDir(dir, LoadOptions{})
		if !errors.Is(err, ErrNotRegular) {
			t.Fatalf("err = %v, want ErrNotRegular", err)
		}
	})
	t.Run("SKILL.md too large", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "s")
		os.Mkdir(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: s\ndescription: x\n---\n"+strings.Repeat("x", MaxFileSize)), 0o644)
		_, err := LoadDir(dir, LoadOptions{})
		if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrInvalid) {
			t.Fatalf("err = %v, want ErrTooLarge and ErrInvalid", err)
		}
	})
	t.Run("missing SKILL.md", func(t *testing.T) {
		_, err := LoadDir(t.TempDir(), LoadOptions{})
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "needs a SKILL.md") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestSplitToolList(t *testing.T) {
	for in, want := range map[string]string{
		"Read Bash(git:*)":                    "Read|Bash(git:*)",
		"Read, Grep,Bash(npm run test:*)  ":   "Read|Grep|Bash(npm run test:*)",
		"":                                    "",
		"Bash(echo a, b) skills.run_script\n": "Bash(echo a, b)|skills.run_script",
	} {
		t.Run(in, func(t *testing.T) {
			if got := strings.Join(SplitToolList(in), "|"); got != want {
				t.Errorf("SplitToolList(%q) = %q, want %q", in, got, want)
			}
		})
	}
}
