package runtime

import (
	"errors"
	"strings"
	"testing"
)

func TestContainerEnvAllowed(t *testing.T) {
	for _, env := range [][]string{
		nil,
		{"FOO=bar"},
		{"EMPTY="},
		{"WITH_EQUALS=a=b=c"},
		{"_UNDERSCORE=1", "lower_case=2", "X1=3"},
		{"PYTHONUNBUFFERED=1", "PYTHONIOENCODING=utf-8", "PYTHONDONTWRITEBYTECODE=1"},
		{"NODE_ENV=production", "TZ=UTC", "LC_ALL=C.UTF-8", "TMPDIR=/tmp"},
		{"LANG=fr_FR.UTF-8"},
		{"UNICODE_VALUE=héllo ✓"},
	} {
		if _, err := ContainerEnv(env); err != nil {
			t.Errorf("%q refused: %v", env, err)
		}
	}
}

func TestContainerEnvRefused(t *testing.T) {
	refused := []string{
		// loader and libc
		"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_DEBUG", "LD_ANYTHING", "GCONV_PATH", "GLIBC_TUNABLES",
		"MALLOC_CHECK_", "LOCPATH", "HOSTALIASES",
		// python
		"PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONWARNINGS", "PYTHONBREAKPOINT", "PYTHONUSERBASE",
		// shells
		"BASH_ENV", "ENV", "IFS", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "CDPATH", "BASH_FUNC_x%%",
		// node, perl, ruby, java, openssl
		"NODE_OPTIONS", "NODE_PATH", "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB",
		"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "OPENSSL_CONF",
		// ours
		"PATH", "HOME",
	}
	for _, name := range refused {
		_, err := ContainerEnv([]string{name + "=x"})
		if !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%s accepted (err %v)", name, err)
			continue
		}
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error does not name the variable: %v", name, err)
		}
	}
}

func TestContainerEnvMalformed(t *testing.T) {
	for name, env := range map[string][]string{
		"no equals":    {"FOO"},
		"empty name":   {"=x"},
		"space":        {"A B=1"},
		"dash":         {"A-B=1"},
		"leading dig":  {"1A=1"},
		"dot":          {"a.b=1"},
		"nul in value": {"A=x\x00y"},
		"nul in name":  {"A\x00=y"},
		"duplicate":    {"A=1", "A=2"},
		"lang twice":   {"LANG=C", "LANG=C.UTF-8"},
		"huge value":   {"A=" + strings.Repeat("v", maxEnvValueLen+1)},
		"huge total":   hugeEnv(),
		"too many":     manyEnv(maxEnvVars + 1),
	} {
		if _, err := ContainerEnv(env); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%s: err %v, want ErrInvalidJob", name, err)
		}
	}
}

func hugeEnv() []string {
	var env []string
	for i := 0; i < 8; i++ {
		env = append(env, "V"+string(rune('A'+i))+"="+strings.Repeat("x", maxEnvValueLen-10))
	}
	return env
}

func manyEnv(n int) []string {
	env := make([]string, n)
	for i := range env {
		env[i] = "V" + strings.Repeat("A", i+1) + "=1"
	}
	return env
}

func TestContainerEnvOrder(t *testing.T) {
	got, err := ContainerEnv([]string{"B=2", "A=1", "LANG=C"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=" + DefaultPath, "HOME=/tmp", "LANG=C", "B=2", "A=1"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("env %q, want %q", got, want)
	}
}

func TestModulePathEnv(t *testing.T) {
	for _, tc := range []struct {
		family, script string
		want           []string
	}{
		{"python", "scripts/fill.py", []string{"PYTHONPATH=/skill:/skill/scripts"}},
		{"python-slim", "core/gif/make.py", []string{"PYTHONPATH=/skill:/skill/core/gif"}},
		{"python", "run.py", []string{"PYTHONPATH=/skill"}},
		{"python", "odd:dir/x.py", []string{"PYTHONPATH=/skill"}},
		{"python", "../x.py", []string{"PYTHONPATH=/skill"}},
		{"python", "/abs/x.py", []string{"PYTHONPATH=/skill"}},
		{"node", "scripts/build.js", []string{"NODE_PATH=/skill:/skill/scripts"}},
		{"shell", "scripts/x.sh", nil},
		{"", "scripts/x", nil},
	} {
		got := ModulePathEnv(tc.family, tc.script)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("ModulePathEnv(%q, %q) = %q, want %q", tc.family, tc.script, got, tc.want)
		}
		if err := validateModuleEnv(got); err != nil {
			t.Errorf("ModulePathEnv(%q, %q) does not validate: %v", tc.family, tc.script, err)
		}
	}
	// The caller still cannot set them; the service sets them in ModuleEnv.
	for _, kv := range []string{"PYTHONPATH=/skill", "NODE_PATH=/skill"} {
		if err := ValidateEnv([]string{kv}); err == nil {
			t.Errorf("caller env %s accepted", kv)
		}
	}
	for _, bad := range [][]string{{"PYTHONSTARTUP=/skill/x.py"}, {"PYTHONPATH=/skill", "PYTHONPATH=/skill"}, {"PYTHONPATH=skill"}, {"PYTHONPATH="}} {
		if err := validateModuleEnv(bad); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("module env %q: %v", bad, err)
		}
	}
}
