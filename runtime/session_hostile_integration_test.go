//go:build integration

package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/process"
	"github.com/skillbox/skillbox/runtime/runtimetest"
)

// The hostile table (runtimetest.Cases) through session sandboxes (isolation =
// "session"): runs of one session share a sandbox, so the table runs in
// a row through as few sandboxes as it can, one per distinct set of
// sandbox-wide limits (fixed when a sandbox is made), and a new one only
// where a case took its sandbox down. A case's skill is placed as the
// runner places it, at /skills/<name>, and its /skill paths are moved
// there (in its files, arguments and module path, and back in what it
// prints, for the checks written for /skill). Each case must hold as it
// does in a single-use sandbox, but for what differs by design: a run
// says warm, its outputs are what it changed in /work, and the cases in
// sessionCaseSkips. After every case no process of the run may be left
// in the sandbox. After the table, a second session's sandbox, beside
// the first, must see nothing of it.

// sessionCaseSkips are the cases whose check cannot hold in a session
// sandbox by its design, with the design point that says why.
var sessionCaseSkips = map[string]string{
	"directory_inputs_round_trip": "a session sandbox's /work holds skillbox's .skillbox dir and earlier runs' files, and the case lists all of /work",
	"host_env_invisible":          "a session sandbox's pid 1 is the supervisor, not dumpable, so /proc/1/environ is refused and the case's script fails (host_env_invisible_in_session checks the rest)",
}

// sessionCasesEndingSandbox are the cases that may take their whole
// session sandbox down, and why; any other case that does fails.
var sessionCasesEndingSandbox = func() map[string]string {
	const forkBomb = "a fork bomb runs into runsc's scaled host pids limit: the sentry cannot make a thread and the sandbox dies (runtime/ocicli/runsc.go)"
	return map[string]string{
		"fork_bomb_python":        forkBomb,
		"fork_bomb_bash":          forkBomb,
		"fork_bomb_then_memory":   forkBomb,
		"fork_bomb_until_timeout": forkBomb,
		"memory_hog":              "an OOM may take the whole sandbox",
	}
}()

// sessionCases keeps one session sandbox per sandbox-wide limits.
type sessionCases struct {
	parent *testing.T
	env    *sessionEnv
	rootfs string
	boxes  map[runtime.SandboxLimits]runtime.SessionSandbox
	all    []runtime.SessionSandbox // every one booted, to destroy at the end
	// seq numbers the runs of the table (run ids are per sandbox).
	seq int
}

// sandbox returns the session sandbox for lim's sandbox-wide limits,
// booting one if there is none or the last one is gone.
func (sc *sessionCases) sandbox(t *testing.T, lim runtime.Limits) runtime.SessionSandbox {
	t.Helper()
	key := lim.Sandbox()
	if sb := sc.boxes[key]; sb != nil {
		select {
		case <-sb.Done():
			// As the session's owner does: what is left of it goes.
			t.Logf("session sandbox %s for %+v is gone: booting a new one", sb.ID(), key)
			if err := sb.Destroy(context.Background()); err != nil {
				t.Errorf("destroy the gone session sandbox %s: %v", sb.ID(), err)
			}
		default:
			return sb
		}
	}
	spec := runtime.SandboxSpec{
		ID: newID(), RootFS: sc.rootfs, Limits: key.Limits(), Boot: runtime.BootSession,
		Session: &runtime.SessionMounts{SkillsDir: sc.env.skillsDir, Supervisor: sc.env.sup},
	}
	sb, err := sc.env.rt.(runtime.SessionBackend).CreateSession(context.Background(), spec)
	if err != nil {
		t.Fatalf("boot a session sandbox for %+v: %v", key, err)
	}
	sc.parent.Cleanup(func() { sb.Destroy(context.Background()) })
	sc.boxes[key] = sb
	sc.all = append(sc.all, sb)
	return sb
}

func (sc *sessionCases) runID(prefix string) string {
	sc.seq++
	return fmt.Sprintf("%s-%d", prefix, sc.seq)
}

var unsafeSkillName = regexp.MustCompile(`[^a-z0-9_-]+`)

// placeSkill copies a case's skill dir into the session's skills dir as
// <name>, with the case's links as links and the single-use path
// runtime.SkillMount in its files moved to the skill's session path, as
// the runner places a skill (sandbox/core/runner's sessionJob).
func (sc *sessionCases) placeSkill(t *testing.T, tc runtimetest.Case, name string, secret runtimetest.HostSecret) string {
	t.Helper()
	dst := filepath.Join(sc.env.skillsDir, name)
	target := runtime.SkillTarget(name)
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dst, 0o755)
	t.Cleanup(func() { os.RemoveAll(dst) })
	for rel, content := range tc.Skill {
		p := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		content = strings.ReplaceAll(content, runtime.SkillMount+"/", target+"/")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range tc.Links {
		if to == runtimetest.SecretPath {
			to = secret.Path
		}
		if err := os.Symlink(to, filepath.Join(dst, link)); err != nil {
			t.Fatal(err)
		}
	}
	return target
}

// moveSkillPath moves a path under runtime.SkillMount to target.
func moveSkillPath(s, target string) string {
	if s == runtime.SkillMount {
		return target
	}
	if strings.HasPrefix(s, runtime.SkillMount+"/") {
		return target + s[len(runtime.SkillMount):]
	}
	return s
}

// leftoverProcs lists the processes of sb (as "pid args") that are not its
// supervisor, an idle python interpreter of it, or the listing run.
func leftoverProcs(t *testing.T, sb runtime.SessionSandbox, id string, sandboxLimits runtime.SandboxLimits) ([]string, error) {
	t.Helper()
	const list = `import os
me = os.getpid()
for p in sorted(os.listdir("/proc")):
    if not p.isdigit() or int(p) in (1, me):
        continue
    try:
        args = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
    except OSError:
        continue
    print(p, repr([a.decode(errors="replace")[:80] for a in args if a]))
`
	res, err := sb.Run(context.Background(), id, runtime.Invocation{Args: []string{"python3", "-c", list},
		Limits: runtime.Limits{Timeout: 60 * time.Second}.WithSandbox(sandboxLimits)})
	if err != nil {
		return nil, fmt.Errorf("list the sandbox's processes: %w", err)
	}
	if res.ExitCode != 0 {
		t.Errorf("list the sandbox's processes: exit %d %s", res.ExitCode, res.Stderr)
	}
	worker := workerMark()
	var left []string
	for _, l := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		if l == "" || strings.Contains(l, worker) {
			continue
		}
		left = append(left, l)
	}
	return left, nil
}

// workerMark is what the listing shows of an idle python interpreter's
// arguments: the start of the supervisor source it runs.
func workerMark() string {
	first, _, _ := strings.Cut(process.SupervisorSource, "\n")
	if len(first) > 60 {
		first = first[:60]
	}
	return first
}

// TestRunSessionSandbox runs the hostile table through session sandboxes
// on runsc, then has another session's sandbox look for what the first
// left: files in /work, /tmp and /dev/shm, processes, environment, a
// loopback server.
func TestRunSessionSandbox(t *testing.T) {
	rootfs := testRootfs(t)
	secret := newHostSecret(t)
	envVal := "ENVSECRET-" + randomHex(10)
	t.Setenv(hostEnvName, envVal)
	env := newSessionEnv(t)
	sc := &sessionCases{parent: t, env: env, rootfs: rootfs, boxes: map[runtime.SandboxLimits]runtime.SessionSandbox{}}

	t.Run("table", func(t *testing.T) {
		for _, tc := range runtimetest.Cases() {
			t.Run(tc.Name, func(t *testing.T) {
				if why, ok := sessionCaseSkips[tc.Name]; ok {
					t.Skip(why)
				}
				c := &runtimetest.CaseEnv{Backend: "runsc", Kernel: runtimetest.KernelGVisor, Secret: secret, EnvVal: envVal, Marker: "skillbox-marker-" + randomHex(8)}
				name := "case-" + unsafeSkillName.ReplaceAllString(strings.ToLower(tc.Name), "-")
				target := sc.placeSkill(t, tc, name, secret)
				args := tc.Args(c)
				for i := range args {
					args[i] = moveSkillPath(args[i], target)
				}
				inv := runtime.Invocation{Args: args, Env: tc.Env, Stdin: []byte(tc.Stdin), Files: tc.Files, Limits: tc.Limits}
				if a := args; len(a) > 1 && strings.HasPrefix(a[1], target+"/") {
					family := map[string]string{"python3": "python", "node": "node"}[a[0]]
					for _, kv := range runtime.ModulePathEnv(family, strings.TrimPrefix(a[1], target+"/")) {
						k, v, _ := strings.Cut(kv, "=")
						parts := strings.Split(v, ":")
						for i := range parts {
							parts[i] = moveSkillPath(parts[i], target)
						}
						inv.ModuleEnv = append(inv.ModuleEnv, k+"="+strings.Join(parts, ":"))
					}
				}
				if inv.Limits.Timeout == 0 {
					inv.Limits.Timeout = 60 * time.Second
				}
				sb := sc.sandbox(t, inv.Limits)
				res, err := sb.Run(context.Background(), sc.runID("case"), inv)
				if err != nil {
					select {
					case <-sb.Done():
						if why, ok := sessionCasesEndingSandbox[tc.Name]; ok {
							t.Fatalf("the case took its session sandbox down, as it may (%s), but Run returned an error, not the result the case checks: %v", why, err)
						}
					default:
					}
					t.Fatalf("Run: %v", err)
				}
				// Whether the sandbox died under the run (its end is seen
				// a moment after the run's).
				var diedUnder bool
				select {
				case <-sb.Done():
					diedUnder = true
				case <-time.After(300 * time.Millisecond):
				}
				if !res.Warm {
					t.Errorf("a run in a session sandbox says warm: false")
				}
				// The checks were written for the skill at /skill.
				res.Stdout = []byte(strings.ReplaceAll(string(res.Stdout), target+"/", runtime.SkillMount+"/"))
				res.Stderr = []byte(strings.ReplaceAll(string(res.Stderr), target+"/", runtime.SkillMount+"/"))
				tc.Check(t, c, res)
				left, err := leftoverProcs(t, sb, sc.runID("ps"), inv.Limits.Sandbox())
				select {
				case <-sb.Done():
					why, ok := sessionCasesEndingSandbox[tc.Name]
					if !ok {
						t.Errorf("the case took its session sandbox %s down", sb.ID())
						return
					}
					t.Logf("the case took its session sandbox %s down (under the run: %v), as it may: %s; the run's result: reason %s exit %d signal %q",
						sb.ID(), diedUnder, why, res.Reason, res.ExitCode, res.Signal)
					// A run whose sandbox died under it did not end by
					// itself: its result must not read as a clean exit.
					if diedUnder && res.ExitCode == 0 && res.Signal == "" {
						t.Errorf("the run's sandbox died under it (reason %s), yet its result says exit 0 without a signal", res.Reason)
					}
					return
				default:
				}
				if err != nil {
					t.Error(err)
				}
				if len(left) > 0 {
					t.Errorf("processes left in the session sandbox after the run:\n%s", strings.Join(left, "\n"))
				}
			})
		}
	})

	t.Run("host_env_invisible_in_session", func(t *testing.T) {
		// host_env_invisible without /proc/1/environ, which the
		// supervisor does not let its runs read: no process of the
		// sandbox has the host's environment.
		const script = `import os
print(dict(os.environ))
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            print(p, open("/proc/%s/environ" % p, "rb").read())
        except OSError as e:
            print(p, "refused", e.errno)
`
		lim := runtime.Limits{Timeout: 60 * time.Second}
		res, err := sc.sandbox(t, lim).Run(context.Background(), sc.runID("env"), runtime.Invocation{Args: []string{"python3", "-c", script}, Limits: lim})
		if err != nil {
			t.Fatal(err)
		}
		wantExit(t, res, 0, runtime.ReasonExit)
		noSecret(t, res, envVal, hostEnvName)
		if !strings.Contains(string(res.Stdout), "\n1 refused 13\n") {
			t.Errorf("the supervisor's environment is readable:\n%s", res.Stdout)
		}
	})

	t.Run("other_session_sees_nothing", func(t *testing.T) {
		// The first session: the table's sandbox of default limits, with
		// files in /work, /tmp and /dev/shm, an environment variable in
		// its runs and a loopback server in the background.
		lim := runtime.Limits{Timeout: 60 * time.Second}
		a := sc.sandbox(t, lim)
		tok, val := randomHex(8), "SESSIONSECRET-"+randomHex(10)
		port := fmt.Sprint(20000 + int(time.Now().UnixNano()%20000))
		envA := []string{"SKILLBOX_SESSION_SECRET=" + val}
		if _, err := a.Background(context.Background(), sc.runID("srv"), runtime.Invocation{
			Args: []string{"python3", "-c", sessionServer, port, tok}, Env: envA, Limits: lim,
		}); err != nil {
			t.Fatal(err)
		}
		res, err := a.Run(context.Background(), sc.runID("a"), runtime.Invocation{
			Args: []string{"python3", "-c", sessionWriter}, Env: envA, Stdin: []byte(tok + " " + port), Limits: lim,
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(res.Stdout); got != "written\nserved "+tok+"\n" {
			t.Fatalf("the first session's run: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}

		// The second session, side by side with the first.
		b := env.boot(t, make(chan runtime.BackgroundRun, 1))
		res, err = b.Run(context.Background(), "probe", runtime.Invocation{
			Args: []string{"python3", "-c", sessionProbe}, Env: []string{"SKILLBOX_SESSION_SECRET=other-" + tok},
			Stdin: []byte(tok + " " + val + " " + port), Limits: lim,
		})
		if err != nil {
			t.Fatal(err)
		}
		noSecret(t, res, val)
		want := "/work absent\n/tmp absent\n/dev/shm absent\nprocesses none\nenvironment clean\nport refused\nport bound\n"
		if string(res.Stdout) != want {
			t.Errorf("the other session saw the first's:\n%s\nwant:\n%s\nstderr: %s", res.Stdout, want, res.Stderr)
		}

		// The first still has all of it, and nothing of the second.
		res, err = a.Run(context.Background(), sc.runID("a"), runtime.Invocation{
			Args: []string{"python3", "-c", sessionCheck}, Stdin: []byte(tok + " " + val + " " + port), Limits: lim,
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := "/work mine\n/tmp mine\n/dev/shm mine\nserver has the variable\nserved " + tok + "\n"; string(res.Stdout) != want {
			t.Errorf("the first session after the second's probe:\n%s\nwant:\n%s\nstderr: %s", res.Stdout, want, res.Stderr)
		}

		// The probe finds all of it where it is: in the first session.
		res, err = a.Run(context.Background(), sc.runID("a"), runtime.Invocation{
			Args: []string{"python3", "-c", sessionProbe}, Env: envA, Stdin: []byte(tok + " " + val + " " + port), Limits: lim,
		})
		if err != nil {
			t.Fatal(err)
		}
		if out := string(res.Stdout); strings.Count(out, "PRESENT") != 3 || !strings.Contains(out, "processes SEEN") ||
			!strings.Contains(out, "environment LEAKED") || !strings.Contains(out, "port REACHED") || !strings.Contains(out, "port BUSY") {
			t.Errorf("the probe, run in the first session, does not find what is there:\n%s\nstderr: %s", out, res.Stderr)
		}

		var ids []string
		for _, sb := range append([]runtime.SessionSandbox{b}, sc.all...) {
			ids = append(ids, sb.ID())
			if err := sb.Destroy(context.Background()); err != nil {
				t.Errorf("destroy %s: %v", sb.ID(), err)
			}
		}
		assertClean(t, "runsc", env.opts, "")
		for _, id := range ids {
			if left := hostProcsWith(id); len(left) > 0 {
				t.Errorf("host processes of session sandbox %s left: %v", id, left)
			}
		}
	})
}

// sessionServer serves its second argument on 127.0.0.1:<first>.
const sessionServer = `import http.server, sys
tok = sys.argv[2].encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(tok)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// sessionWriter (stdin: token port) writes a-<token> in /work, /tmp and
// /dev/shm and waits for the background server.
const sessionWriter = `import sys, time, urllib.request
tok, port = sys.stdin.read().split()
for d in ("/work", "/tmp", "/dev/shm"):
    open(d + "/a-" + tok, "w").write(tok)
print("written")
for i in range(300):
    try:
        print("served", urllib.request.urlopen("http://127.0.0.1:%s/" % port, timeout=5).read().decode()); break
    except OSError:
        time.sleep(0.1)
`

// sessionProbe (stdin: token value port) looks for the first session's
// files, processes, environment and server, then takes the same names
// for itself: files b-<token> and the port.
const sessionProbe = `import os, socket, sys
tok, val, port = sys.stdin.read().split()
me = os.getpid()
for d in ("/work", "/tmp", "/dev/shm"):
    found = [os.path.join(r, n) for r, ds, fs in os.walk(d) for n in ds + fs if tok in n]
    print(d, "absent" if not found and not os.path.lexists(d + "/a-" + tok) else "PRESENT %s" % found)
seen = []
for p in os.listdir("/proc"):
    if not p.isdigit() or int(p) == me:
        continue
    for f in ("cmdline", "environ"):
        try:
            b = open("/proc/%s/%s" % (p, f), "rb").read()
        except OSError:
            continue
        if tok.encode() in b or val.encode() in b:
            seen.append("%s/%s" % (p, f))
print("processes", "none" if not seen else "SEEN %s" % seen)
print("environment", "LEAKED" if any(val in v for v in os.environ.values()) else "clean")
try:
    socket.create_connection(("127.0.0.1", int(port)), timeout=5)
    print("port REACHED")
except OSError:
    print("port refused")
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(port)))
    s.listen()
    print("port bound")
except OSError:
    print("port BUSY")
for d in ("/work", "/tmp", "/dev/shm"):
    open(d + "/b-" + tok, "w").write(tok)
`

// sessionCheck (stdin: token value port) is the first session's look at
// its own files, server and environment after the second's probe, and
// for the second's files and variable (other-<token>).
const sessionCheck = `import os, sys, urllib.request
tok, val, port = sys.stdin.read().split()
for d in ("/work", "/tmp", "/dev/shm"):
    mine = open(d + "/a-" + tok).read() == tok
    print(d, "mine" if mine and not os.path.lexists(d + "/b-" + tok) else "OTHER")
has = other = False
for p in os.listdir("/proc"):
    try:
        env = open("/proc/%s/environ" % p, "rb").read()
    except OSError:
        continue
    has = has or val.encode() in env
    other = other or ("other-" + tok).encode() in env
print("server has the variable" if has and not other else "variable gone" if not has else "OTHER's variable")
print("served", urllib.request.urlopen("http://127.0.0.1:%s/" % port, timeout=10).read().decode())
`
