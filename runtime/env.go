package runtime

import (
	"path"
	"strings"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// The container environment is an allowlist: PATH, HOME and LANG are set by
// us and the job may add the variables policy allows (DefaultEnvAllow plus
// the rules' env lists, checked by the service), but never ones that make an
// interpreter, the dynamic loader, a shell or a tool the script calls load
// code from somewhere other than the script it was asked to run
// (EnvNeverAllowed, checked here too). The script can still do anything it likes inside the
// sandbox; the point is that a caller who only controls env (and not the
// script) cannot turn "run this reviewed skill script" into "run my code", and
// that the interpreter is the one the image chose.

// Default environment entries every container gets.
const (
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	DefaultLang = "C.UTF-8"
)

// Caps on the environment a job may pass.
const (
	maxEnvVars     = 128
	maxEnvBytes    = 128 << 10 // total of all KEY=VALUE strings
	maxEnvValueLen = 32 << 10
)

// reservedEnv are names we set ourselves; a job may not override them
// (PATH decides which interpreter "python3" is; HOME is HomeDir).
var reservedEnv = map[string]bool{
	"PATH": true,
	"HOME": true,
}

// refusedEnv are names that load code, change how code is found or parsed,
// or make a tool a script calls run something else (tar's --checkpoint
// action, git's ssh command, a pager or editor). No policy rule can allow
// them: see EnvNeverAllowed.
var refusedEnv = map[string]bool{
	// dynamic loader and libc
	"GCONV_PATH": true, "GLIBC_TUNABLES": true, "LOCPATH": true, "NLSPATH": true,
	"HOSTALIASES": true, "RES_OPTIONS": true, "LOCALDOMAIN": true,
	// shells
	"BASH_ENV": true, "ENV": true, "IFS": true, "SHELLOPTS": true, "BASHOPTS": true,
	"PS4": true, "PROMPT_COMMAND": true, "CDPATH": true, "GLOBIGNORE": true,
	"BASH_XTRACEFD": true, "BASH_LOADABLES_PATH": true, "SHELL": true, "ZDOTDIR": true,
	// node
	"NODE_OPTIONS": true, "NODE_PATH": true, "NODE_REPL_EXTERNAL_MODULE": true,
	"NODE_EXTRA_CA_CERTS": true, "NODE_TLS_REJECT_UNAUTHORIZED": true,
	// java, openssl
	"JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true, "JDK_JAVA_OPTIONS": true, "CLASSPATH": true,
	"OPENSSL_CONF": true, "OPENSSL_ENGINES": true, "OPENSSL_MODULES": true,
	// tools a script may call
	"TAR_OPTIONS": true, "PAGER": true, "MANPAGER": true, "SYSTEMD_PAGER": true,
	"EDITOR": true, "VISUAL": true, "WGETRC": true, "BROWSER": true,
	"GZIP": true, "ZIPOPT": true, "UNZIP": true, "XZ_OPT": true, "BZIP2": true,
}

// refusedEnvPrefixes catch whole families (LD_PRELOAD, LD_AUDIT, bash
// exported functions, glibc malloc tunables, git's config and commands,
// less's input preprocessor, perl, ruby, TLS trust, curl, npm and pip
// settings). Matching is case-sensitive except for npm_config_, which npm
// reads in either case.
var refusedEnvPrefixes = []string{"LD_", "DYLD_", "BASH_FUNC_", "MALLOC_", "PERL", "RUBY",
	"GIT_", "LESS", "SSL_CERT_", "CURL_", "PIP_", "NPM_CONFIG_", "PYTHON", "GEM_", "BUNDLE_"}

// pythonEnvAllowed are the PYTHON* variables that only change output or
// hashing; every other PYTHON* name (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME,
// PYTHONWARNINGS which imports modules, PYTHONBREAKPOINT, ...) is refused.
var pythonEnvAllowed = map[string]bool{
	"PYTHONUNBUFFERED":        true,
	"PYTHONDONTWRITEBYTECODE": true,
	"PYTHONIOENCODING":        true,
	"PYTHONHASHSEED":          true,
	"PYTHONUTF8":              true,
	"PYTHONFAULTHANDLER":      true,
	"PYTHONNOUSERSITE":        true,
}

// DefaultEnvAllow are the names every run may be given without a policy
// rule naming them: locale, time zone, terminal and colour settings, and
// the PYTHON* names that only change output or hashing. A pattern ending
// in "*" matches every name with that prefix. Policy rules add to this
// (policy "x" { env = ["MODE", "MYTOOL_*"] }); EnvNeverAllowed names are
// refused whatever the rules say.
var DefaultEnvAllow = []string{
	"LANG", "LANGUAGE", "LC_*", "TZ", "TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR",
	"CLICOLOR", "COLUMNS", "LINES",
	"PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONUTF8",
}

// EnvNeverAllowed says why no policy rule can allow name, or "" when a rule
// may. These are the reserved names (PATH, HOME) and the interpreter,
// loader and tool control names above.
func EnvNeverAllowed(name string) string {
	if reservedEnv[name] {
		return "is set by skillbox and cannot be overridden"
	}
	if refusedEnv[name] {
		return "can make the interpreter, the loader or a tool the script calls run other code"
	}
	if pythonEnvAllowed[name] {
		return ""
	}
	upper := strings.ToUpper(name)
	for _, p := range refusedEnvPrefixes {
		if strings.HasPrefix(name, p) || (p == "NPM_CONFIG_" && strings.HasPrefix(upper, p)) {
			return "can make the interpreter, the loader or a tool the script calls run other code"
		}
	}
	return ""
}

// EnvPatternMatch reports whether an allowlist pattern ("NAME", or
// "PREFIX*") matches name.
func EnvPatternMatch(pattern, name string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return pattern == name
}

// CheckEnvPattern says what is wrong with an allowlist pattern, or "".
func CheckEnvPattern(pattern string) string {
	name, prefix := strings.CutSuffix(pattern, "*")
	switch {
	case pattern == "*":
		return "allows every name: list the names (or NAME_* prefixes) the skill needs"
	case prefix && name == "":
		return "is empty"
	case strings.Contains(name, "*"):
		return "may only end in \"*\" (a prefix), like \"MYTOOL_*\""
	case !validEnvName(name):
		return "is not a valid name ([A-Za-z_][A-Za-z0-9_]*, optionally ending in \"*\")"
	}
	if why := EnvNeverAllowed(name); why != "" && (!prefix || EnvNeverAllowed(name+"X") != "") {
		return why + "; no rule can allow it"
	}
	return ""
}

// validEnvName reports whether name is a portable shell identifier.
func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// envRefusal says why name may not be set by a job whatever the policy,
// or "" when it may (the policy's allowlist is checked by the service).
func envRefusal(name string) string {
	if !validEnvName(name) {
		return "is not a valid name ([A-Za-z_][A-Za-z0-9_]*)"
	}
	return EnvNeverAllowed(name)
}

// ValidateEnv checks job environment entries (KEY=VALUE) against the
// allowlist rules; the error wraps ErrInvalidJob and names the variable.
func ValidateEnv(env []string) error {
	_, err := ContainerEnv(env)
	return err
}

// ContainerEnv returns the full environment of the container process: PATH,
// HOME=/tmp (HomeDir: writable, outside the workdir) and LANG=C.UTF-8, then the job's entries in their order (a job's
// LANG replaces the default). It refuses dangerous, reserved, malformed and
// duplicate names, NUL bytes, and oversized environments.
func ContainerEnv(env []string) ([]string, error) {
	if len(env) > maxEnvVars {
		return nil, errkind.Errorf(ErrInvalidJob, "%d environment variables, at most %d", len(env), maxEnvVars)
	}
	seen := make(map[string]bool, len(env))
	total := 0
	lang := "LANG=" + DefaultLang
	var extra []string
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, errkind.Errorf(ErrInvalidJob, "environment entry %q is not KEY=VALUE", truncateForError(kv))
		}
		if why := envRefusal(name); why != "" {
			return nil, errkind.Errorf(ErrInvalidJob, "environment variable %q %s", truncateForError(name), why)
		}
		if seen[name] {
			return nil, errkind.Errorf(ErrInvalidJob, "environment variable %q given twice", name)
		}
		seen[name] = true
		if strings.IndexByte(value, 0) >= 0 {
			return nil, errkind.Errorf(ErrInvalidJob, "environment variable %q contains a NUL byte", name)
		}
		if len(value) > maxEnvValueLen {
			return nil, errkind.Errorf(ErrInvalidJob, "environment variable %q is %d bytes, at most %d", name, len(value), maxEnvValueLen)
		}
		total += len(kv)
		if total > maxEnvBytes {
			return nil, errkind.Errorf(ErrInvalidJob, "environment is over %d bytes", maxEnvBytes)
		}
		if name == "LANG" {
			lang = kv
			continue
		}
		extra = append(extra, kv)
	}
	out := make([]string, 0, 3+len(extra))
	out = append(out, "PATH="+DefaultPath, "HOME="+HomeDir, lang)
	return append(out, extra...), nil
}

func truncateForError(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// ModulePathEnv returns the module-path variables that let a script of
// interpreter family ("python", "node", "shell"; an image name such as
// "python-slim" counts as its family) import its skill's own code: the skill
// root (SkillMount) and the script's own directory, in that order. Skills
// are written to be run from their root, so `from scripts.utils import x`
// must work when scripts/x.py runs, and so must importing a sibling module.
// scriptRel is the script's path relative to the skill root, e.g.
// "scripts/fill.py".
//
// python gets PYTHONPATH=/skill:/skill/scripts; node gets NODE_PATH (which
// require() honours; ES modules ignore it); other families get nothing.
// A script at the skill root, or a directory that cannot be a path list
// element (it holds ':' or is not a clean relative path), adds only the root.
//
// The result goes into Invocation.ModuleEnv, not Invocation.Env: callers may never set
// these names (ContainerEnv refuses them), the service sets them to paths
// inside the read-only skill mount.
func ModulePathEnv(family, scriptRel string) []string {
	dirs := []string{SkillMount}
	if d := path.Dir(scriptRel); d != "." && d == path.Clean(d) && !path.IsAbs(d) &&
		d != ".." && !strings.HasPrefix(d, "../") && !strings.ContainsAny(d, ":\x00") {
		dirs = append(dirs, SkillMount+"/"+d)
	}
	return ModulePathEnvDirs(family, dirs...)
}

// ModulePathEnvDirs returns the module-path variable of interpreter family
// (as ModulePathEnv) listing dirs, absolute paths in the container, in
// order: skills.run_code puts every mounted skill's root (SkillTarget) on
// it. Families without one, or no dirs, give nothing.
func ModulePathEnvDirs(family string, dirs ...string) []string {
	fam, _, _ := strings.Cut(family, "-")
	var name string
	switch fam {
	case "python":
		name = "PYTHONPATH"
	case "node":
		name = "NODE_PATH"
	default:
		return nil
	}
	if len(dirs) == 0 {
		return nil
	}
	return []string{name + "=" + strings.Join(dirs, ":")}
}

// moduleEnvNames are the only names Invocation.ModuleEnv may set.
var moduleEnvNames = map[string]bool{"PYTHONPATH": true, "NODE_PATH": true}

// validateModuleEnv checks Invocation.ModuleEnv: each of moduleEnvNames at most
// once, every element an absolute, clean path in the container.
func validateModuleEnv(env []string) error {
	seen := map[string]bool{}
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !moduleEnvNames[name] {
			return errkind.Errorf(ErrInvalidJob, "module path entry %q: only PYTHONPATH and NODE_PATH are allowed (see ModulePathEnv)", truncateForError(kv))
		}
		if seen[name] {
			return errkind.Errorf(ErrInvalidJob, "module path %s given twice", name)
		}
		seen[name] = true
		if len(value) > maxEnvValueLen {
			return errkind.Errorf(ErrInvalidJob, "module path %s is %d bytes, at most %d", name, len(value), maxEnvValueLen)
		}
		for _, p := range strings.Split(value, ":") {
			if !path.IsAbs(p) || path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
				return errkind.Errorf(ErrInvalidJob, "module path %s element %q must be an absolute, clean path", name, truncateForError(p))
			}
		}
	}
	return nil
}
