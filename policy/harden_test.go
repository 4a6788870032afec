package policy

import (
	"errors"
	"strings"
	"testing"
)

// The default request line cap is small enough that a few
// dozen requests cannot hold gigabytes.
func TestDefaultMaxLineBytesIsSmall(t *testing.T) {
	if n := Default().Daemon.MaxLineBytes; n > 4<<20 {
		t.Fatalf("default daemon.max_line_bytes is %d; want at most 4 MiB", n)
	}
}

// Env is an allowlist. A rule lists names or PREFIX_* patterns;
// names that steer interpreters, the loader or tools cannot be listed; what
// no rule lists is denied with an error naming it and what to change.
func TestEnvAllowlistRules(t *testing.T) {
	for _, tc := range []struct{ pattern, want string }{
		{"LD_PRELOAD", "LD_PRELOAD"},
		{"TAR_OPTIONS", "TAR_OPTIONS"},
		{"GIT_*", "GIT_*"},
		{"PYTHONPATH", "PYTHONPATH"},
	} {
		t.Run(tc.pattern, func(t *testing.T) {
			_, err := Parse([]byte("policy \"p\" {\n  skills = [\"*\"]\n  env = [\""+tc.pattern+"\"]\n}\n"), "env.hcl")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "env.hcl:3") {
				t.Fatalf("env = [%q]: %v; want an error at env.hcl:3 naming it", tc.pattern, err)
			}
		})
	}
	c, err := Parse([]byte(`policy "tool" {
  skills = ["tool-*"]
  env    = ["MYTOOL_*", "MODE"]
}
`), "env.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		skill string
		names []string
		want  string // "" allowed, else in the error
	}{
		{"tool-a", []string{"MYTOOL_MODE", "MODE", "LANG", "TZ"}, ""},
		{"tool-a", []string{"OTHER"}, `"OTHER" is not allowed`},
		{"other", []string{"MODE"}, `env = ["MODE"]`},
		{"tool-a", []string{"TAR_OPTIONS"}, "no policy rule can allow it"},
		{"tool-a", []string{"LESSOPEN"}, "no policy rule can allow it"},
	} {
		err := c.For(tc.skill).CheckEnv(tc.names)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %v: %v", tc.skill, tc.names, err)
		case tc.want != "" && (!errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %v: %v; want denied mentioning %q", tc.skill, tc.names, err, tc.want)
		}
	}
}
