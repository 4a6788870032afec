package skills

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func writeSkill(t testing.TB, dir, name, desc string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	content := fmt.Sprintf("---\nname: %s\ndescription: %s\n---\nBody of %s.\n", name, desc, name)
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func names(skills []*Skill) string {
	var out []string
	for _, s := range skills {
		out = append(out, s.Name)
	}
	return strings.Join(out, ",")
}

func TestRegistryFixtures(t *testing.T) {
	roots := []string{"testdata/roots/global", "testdata/roots/user", "testdata/roots/project"}
	reg, err := NewRegistry(RegistryOptions{Roots: roots, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Run("list sorted, dot-dirs and node_modules skipped", func(t *testing.T) {
		if got := names(reg.List()); got != "alpha,beta,grouped,lenient,shared" {
			t.Errorf("names = %s", got)
		}
	})
	t.Run("later root wins", func(t *testing.T) {
		s, err := reg.Get("shared")
		if err != nil {
			t.Fatal(err)
		}
		if s.Description != "Shared skill, project version." || !strings.Contains(s.Dir, "project") {
			t.Errorf("shared = %q from %s", s.Description, s.Dir)
		}
	})
	t.Run("lenient indexing keeps warnings", func(t *testing.T) {
		s, err := reg.Get("lenient")
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Warnings) != 2 {
			t.Errorf("warnings = %q", s.Warnings)
		}
	})
	t.Run("unusable skill reported", func(t *testing.T) {
		probs := reg.Problems()
		if len(probs) != 1 || filepath.Base(probs[0].Path) != "broken" || !strings.Contains(probs[0].Err.Error(), "description") {
			t.Fatalf("problems = %v", probs)
		}
		_, err := reg.Get("broken")
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "could not be loaded") {
			t.Errorf("Get(broken) = %v", err)
		}
	})
	t.Run("digests", func(t *testing.T) {
		for _, s := range reg.List() {
			if !strings.HasPrefix(s.Digest, "sha256:") {
				t.Errorf("%s digest = %q", s.Name, s.Digest)
			}
		}
	})
	t.Run("get errors", func(t *testing.T) {
		tests := []struct {
			name string
			want error
			msg  string
		}{
			{"alpah", ErrNotFound, `did you mean "alpha"`},
			{"nothing-like-it", ErrNotFound, "skills.list"},
			{"../alpha", ErrBadName, "not paths"},
			{"alpha/SKILL.md", ErrBadName, "not paths"},
			{"a\x00", ErrBadName, "not paths"},
			{"", ErrBadName, "empty"},
			{"ALPHA", ErrBadName, "lowercase"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := reg.Get(tt.name)
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
					t.Errorf("Get(%q) = %v, want %v containing %q", tt.name, err, tt.want, tt.msg)
				}
			})
		}
	})
}

// TestRegistryNameCollision: a skill directory cannot take over another
// skill's name. In testdata/collision/root,
// aa-helper declares "name: net-x" and sorts before the real net-x;
// group-a/dup-x and group-b/dup-x claim one name in one root; aa-link is a
// symlink to net-x under another name.
func TestRegistryNameCollision(t *testing.T) {
	load := func(t *testing.T, roots ...string) *Registry {
		t.Helper()
		reg, err := NewRegistry(RegistryOptions{Roots: roots, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		return reg
	}
	root, later := "testdata/collision/root", "testdata/collision/later"
	reg := load(t, root)
	realDir, err := filepath.Abs(filepath.Join(root, "net-x"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the name is the directory's", func(t *testing.T) {
		s, err := reg.Get("net-x")
		if err != nil {
			t.Fatal(err)
		}
		if s.Dir != realDir || s.Body != "Real net-x.\n" {
			t.Errorf("net-x = %s (%q), want the real one in %s", s.Dir, s.Body, realDir)
		}
	})
	t.Run("a frontmatter name that differs is indexed under the directory name only", func(t *testing.T) {
		s, err := reg.Get("aa-helper")
		if err != nil {
			t.Fatal(err)
		}
		if s.Name != "aa-helper" || s.Body != "Impostor.\n" || len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "indexed under the directory name") {
			t.Errorf("aa-helper = %q %q, warnings %q", s.Name, s.Body, s.Warnings)
		}
		for _, s := range reg.List() {
			if s.Name == "net-x" && s.Dir != realDir {
				t.Errorf("net-x listed from %s", s.Dir)
			}
		}
	})
	t.Run("a link under another name does not hide the real skill", func(t *testing.T) {
		if got := names(reg.List()); got != "aa-helper,aa-link,net-x" {
			t.Errorf("names = %s", got)
		}
	})
	t.Run("a name claimed twice in one root is refused for both", func(t *testing.T) {
		_, err := reg.Get("dup-x")
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("Get(dup-x) = %v, want ErrConflict", err)
		}
		for _, want := range []string{"group-a/dup-x", "group-b/dup-x", "refused", "rename or remove"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		var n int
		for _, p := range reg.Problems() {
			if errors.Is(p.Err, ErrConflict) {
				n++
			}
		}
		if c := reg.Conflicts(); n != 2 || len(c) != 1 || len(c["dup-x"]) != 2 {
			t.Errorf("conflict problems = %d, conflicts = %v", n, c)
		}
	})
	t.Run("a later root still overrides, by configured precedence", func(t *testing.T) {
		reg := load(t, root, later)
		s, err := reg.Get("dup-x")
		if err != nil || !strings.Contains(s.Dir, "later") {
			t.Fatalf("dup-x = %v, %v", s, err)
		}
		if len(reg.Conflicts()) != 0 {
			t.Errorf("conflicts = %v", reg.Conflicts())
		}
		// ...and an earlier root's conflict does not shadow it the other way.
		reg = load(t, later, root)
		if _, err := reg.Get("dup-x"); !errors.Is(err, ErrConflict) {
			t.Errorf("dup-x with the conflicted root last = %v", err)
		}
	})
	t.Run("names equal under NFKC conflict", func(t *testing.T) {
		root := t.TempDir()
		writeSkill(t, filepath.Join(root, "net-x"), "net-x", "Real.")
		writeSkill(t, filepath.Join(root, "\uff4e\uff45\uff54-x"), "net-x", "Fullwidth letters.")
		reg := load(t, root)
		if _, err := reg.Get("net-x"); !errors.Is(err, ErrConflict) {
			t.Errorf("Get(net-x) = %v, want ErrConflict", err)
		}
	})
	t.Run("a conflict is resolved by removing one claimant", func(t *testing.T) {
		root := t.TempDir()
		writeSkill(t, filepath.Join(root, "a", "x"), "x", "A.")
		writeSkill(t, filepath.Join(root, "b", "x"), "x", "B.")
		reg := load(t, root)
		if _, err := reg.Get("x"); !errors.Is(err, ErrConflict) {
			t.Fatalf("Get(x) = %v", err)
		}
		if err := os.RemoveAll(filepath.Join(root, "a")); err != nil {
			t.Fatal(err)
		}
		if err := reg.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s, err := reg.Get("x"); err != nil || s.Description != "B." || len(reg.Problems()) != 0 {
			t.Errorf("Get(x) = %v, %v; problems %v", s, err, reg.Problems())
		}
	})
}

func TestRegistryNFKCLookup(t *testing.T) {
	root := t.TempDir()
	writeSkill(t, filepath.Join(root, "café"), "café", "Precomposed.")
	reg, _ := NewRegistry(RegistryOptions{Roots: []string{root}})
	reg.Reload(context.Background())
	if _, err := reg.Get("cafe\u0301"); err != nil {
		t.Fatalf("decomposed lookup: %v", err)
	}
}

func TestRegistryBounds(t *testing.T) {
	root := t.TempDir()
	writeSkill(t, filepath.Join(root, "a", "b", "c", "deep3"), "deep3", "Three levels down.")
	writeSkill(t, filepath.Join(root, "a", "b", "c", "d", "deep4"), "deep4", "Four levels down.")
	for i := range 5 {
		n := fmt.Sprintf("s%d", i)
		writeSkill(t, filepath.Join(root, n), n, "Counted.")
	}
	os.Symlink(root, filepath.Join(root, "a", "loop")) // must not recurse forever

	t.Run("depth", func(t *testing.T) {
		reg, _ := NewRegistry(RegistryOptions{Roots: []string{root}, MaxDepth: 4})
		reg.Reload(context.Background())
		if got := names(reg.List()); got != "deep3,s0,s1,s2,s3,s4" {
			t.Errorf("names = %s", got)
		}
	})
	t.Run("count", func(t *testing.T) {
		reg, _ := NewRegistry(RegistryOptions{Roots: []string{root}, MaxSkills: 3})
		reg.Reload(context.Background())
		if len(reg.List()) != 3 {
			t.Errorf("indexed %d, want 3", len(reg.List()))
		}
		probs := reg.Problems()
		if len(probs) != 1 || !errors.Is(probs[0].Err, ErrTooLarge) {
			t.Errorf("problems = %v", probs)
		}
	})
	t.Run("duplicate in one root", func(t *testing.T) {
		root := t.TempDir()
		writeSkill(t, filepath.Join(root, "one", "dup"), "dup", "First.")
		writeSkill(t, filepath.Join(root, "two", "dup"), "dup", "Second.")
		reg, _ := NewRegistry(RegistryOptions{Roots: []string{root}})
		reg.Reload(context.Background())
		// Neither wins: sort order must not decide a skill's identity.
		if s, err := reg.Get("dup"); !errors.Is(err, ErrConflict) {
			t.Fatalf("Get(dup) = %v, %v; want ErrConflict", s, err)
		}
		if p := reg.Problems(); len(p) != 2 || !errors.Is(p[0].Err, ErrConflict) || !errors.Is(p[1].Err, ErrConflict) {
			t.Errorf("problems = %v", p)
		}
	})
	t.Run("missing root is not an error", func(t *testing.T) {
		reg, _ := NewRegistry(RegistryOptions{Roots: []string{filepath.Join(root, "nope"), root}})
		if err := reg.Reload(context.Background()); err != nil || len(reg.Problems()) != 0 {
			t.Errorf("err = %v, problems = %v", err, reg.Problems())
		}
	})
	t.Run("root that is a skill", func(t *testing.T) {
		reg, _ := NewRegistry(RegistryOptions{Roots: []string{filepath.Join(root, "s1")}})
		reg.Reload(context.Background())
		if names(reg.List()) != "s1" {
			t.Errorf("names = %s", names(reg.List()))
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		reg, _ := NewRegistry(RegistryOptions{Roots: []string{root}})
		if err := reg.Reload(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v", err)
		}
	})
}

// TestRegistryReloadReuses checks that an unchanged skill is not parsed or
// hashed again, and a changed one is.
func TestRegistryReloadReuses(t *testing.T) {
	root := t.TempDir()
	writeSkill(t, filepath.Join(root, "a"), "a", "A.")
	writeSkill(t, filepath.Join(root, "b"), "b", "B.")
	reg, _ := NewRegistry(RegistryOptions{Roots: []string{root}})
	ctx := context.Background()
	reg.Reload(ctx)
	a1, _ := reg.Get("a")
	b1, _ := reg.Get("b")
	gen := reg.Generation()
	reg.Reload(ctx)
	if a2, _ := reg.Get("a"); a2 != a1 || reg.Generation() != gen {
		t.Error("unchanged reload rebuilt skill a or bumped the generation")
	}
	os.WriteFile(filepath.Join(root, "b", "notes.txt"), []byte("x"), 0o644)
	reg.Reload(ctx)
	b2, _ := reg.Get("b")
	if b2 == b1 || b2.Digest == b1.Digest || reg.Generation() == gen {
		t.Error("change inside skill b not picked up")
	}
}

func TestRegistryWatch(t *testing.T) {
	global, project := t.TempDir(), t.TempDir()
	writeSkill(t, filepath.Join(global, "base"), "base", "Base skill.")
	reg, err := NewRegistry(RegistryOptions{
		Roots:    []string{global, project},
		Logger:   testLogger(t),
		Debounce: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := reg.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- reg.Watch(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	time.Sleep(100 * time.Millisecond) // let Watch set up its watches

	// within waits up to a second for cond, failing with what it last saw.
	within := func(t *testing.T, what string, cond func() (bool, string)) {
		t.Helper()
		waitfor.NoError(t, what, time.Second, func() error {
			if ok, state := cond(); !ok {
				return fmt.Errorf("last state: %s", state)
			}
			return nil
		})
	}
	desc := func(name string) func() (bool, string) {
		return func() (bool, string) {
			s, err := reg.Get(name)
			if err != nil {
				return false, err.Error()
			}
			return true, s.Description
		}
	}
	dir := filepath.Join(project, "fresh")

	t.Run("add", func(t *testing.T) {
		writeSkill(t, dir, "fresh", "Version one.")
		within(t, "new skill", desc("fresh"))
	})
	t.Run("change", func(t *testing.T) {
		writeSkill(t, dir, "fresh", "Version two.")
		within(t, "changed description", func() (bool, string) {
			s, err := reg.Get("fresh")
			return err == nil && s.Description == "Version two.", fmt.Sprint(s, err)
		})
	})
	t.Run("change a script", func(t *testing.T) {
		os.MkdirAll(filepath.Join(dir, "scripts"), 0o755)
		time.Sleep(200 * time.Millisecond) // the new directory gets indexed and watched
		before, _ := reg.Get("fresh")
		os.WriteFile(filepath.Join(dir, "scripts", "run.sh"), []byte("echo hi\n"), 0o755)
		within(t, "new digest", func() (bool, string) {
			s, _ := reg.Get("fresh")
			return s.Digest != before.Digest, s.Digest
		})
	})
	t.Run("broken edit keeps last good version", func(t *testing.T) {
		os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: fresh\ndescription: [broken\n---\n"), 0o644)
		within(t, "problem reported", func() (bool, string) {
			for _, p := range reg.Problems() {
				if p.Path == dir && strings.Contains(p.Err.Error(), "keeping the last good version") {
					return true, ""
				}
			}
			return false, fmt.Sprint(reg.Problems())
		})
		s, err := reg.Get("fresh")
		if err != nil || s.Description != "Version two." {
			t.Fatalf("last good version lost: %v %v", s, err)
		}
	})
	t.Run("fixed edit", func(t *testing.T) {
		writeSkill(t, dir, "fresh", "Version three.")
		within(t, "fixed skill", func() (bool, string) {
			s, err := reg.Get("fresh")
			return err == nil && s.Description == "Version three." && len(reg.Problems()) == 0, fmt.Sprint(s, err, reg.Problems())
		})
	})
	t.Run("override and restore", func(t *testing.T) {
		writeSkill(t, filepath.Join(project, "base"), "base", "Project override.")
		within(t, "override", func() (bool, string) {
			s, _ := reg.Get("base")
			return s.Description == "Project override.", s.Description
		})
		os.RemoveAll(filepath.Join(project, "base"))
		within(t, "global version back", func() (bool, string) {
			s, _ := reg.Get("base")
			return s.Description == "Base skill.", s.Description
		})
	})
	t.Run("remove", func(t *testing.T) {
		os.RemoveAll(dir)
		within(t, "removal", func() (bool, string) {
			_, err := reg.Get("fresh")
			return errors.Is(err, ErrNotFound), fmt.Sprint(err)
		})
	})
	t.Run("root removed and recreated", func(t *testing.T) {
		os.RemoveAll(project)
		time.Sleep(200 * time.Millisecond) // Watch sees the root gone before it comes back
		writeSkill(t, filepath.Join(project, "again"), "again", "Back again.")
		within(t, "skill in the recreated root", desc("again"))
	})
	t.Run("root created later", func(t *testing.T) {
		// A root that does not exist yet is found through its parent.
		late := filepath.Join(t.TempDir(), "late", "skills")
		reg2, _ := NewRegistry(RegistryOptions{Roots: []string{late}, Debounce: 20 * time.Millisecond})
		ctx2, cancel2 := context.WithCancel(ctx)
		defer cancel2()
		go reg2.Watch(ctx2)
		time.Sleep(50 * time.Millisecond) // Watch's first reload is over: a watch, not it, finds the skill
		writeSkill(t, filepath.Join(late, "later"), "later", "Appeared later.")
		waitfor.True(t, "the skill in a late root", time.Second, func() bool {
			_, err := reg2.Get("later")
			return err == nil
		})
	})
}

func BenchmarkRegistryReload(b *testing.B) {
	root := b.TempDir()
	for i := range 1000 {
		n := fmt.Sprintf("skill-%04d", i)
		writeSkill(b, filepath.Join(root, n), n, "A benchmark skill with a description of typical length for the catalog.")
	}
	reg, _ := NewRegistry(RegistryOptions{Roots: []string{root}})
	ctx := context.Background()
	reg.Reload(ctx)
	b.ResetTimer()
	for b.Loop() {
		reg.Reload(ctx)
	}
}
