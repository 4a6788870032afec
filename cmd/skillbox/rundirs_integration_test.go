//go:build integration

package main

// Run dirs through the daemon: while root's run_script and
// run_code runs are in flight (cold, and warm from the pool), other real
// uids walk /run/skillbox and every process's root, cwd and descriptors,
// knowing the run ids (which ps shows), and reach nothing: no secret, no
// path inside a run dir or the skill snapshots.

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/runtimetest"
	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/runner"
)

func init() {
	runtimetest.ProbeIfAsked()
}

// leakerScript copies the input's secret and its environment's into its
// workdir, opens /work to everyone, says so and waits.
const leakerScript = `umask 000
cat /work/input.txt > /work/secret.txt
printf '%s\n' "$SECRET_TOKEN" >> /work/secret.txt
mkdir -p /work/outputs
cp /work/secret.txt /work/outputs/out.txt
chmod 0777 /work /work/outputs
chmod 0666 /work/secret.txt /work/outputs/out.txt /work/input.txt
echo ready
sleep 25
`

// runDirsOf are the run dirs in runtime.DefaultRunDir whose workdir holds
// secret (read as root; other tests' runs may share the dir).
func runDirsOf(secret string) []string {
	ents, _ := os.ReadDir(runtime.DefaultRunDir)
	var out []string
	for _, e := range ents {
		dir := filepath.Join(runtime.DefaultRunDir, e.Name())
		if b, err := os.ReadFile(filepath.Join(dir, "work", "secret.txt")); err == nil && bytes.Contains(b, []byte(secret)) {
			out = append(out, dir)
		}
	}
	return out
}

func TestDaemonRunFilesPrivate(t *testing.T) {
	needDaemon(t)
	root := extraSkill(t, "leaker", "scripts/leak.sh", leakerScript)
	for _, tc := range []struct {
		name string
		pool int
		code bool
	}{
		{"run_script-cold", 0, false},
		{"run_code-cold", 0, true},
		{"run_script-warm", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newItDaemonPool(t, tc.pool, root)
			d.start()
			c := d.client()
			ctx := ctxT(t)
			bin := copyForUID(t, os.Args[0], d.base)
			canary, canarySecret := filepath.Join(d.base, "canary"), "CANARY-"+strconv.FormatInt(time.Now().UnixNano(), 36)
			if err := os.WriteFile(canary, []byte(canarySecret), 0o644); err != nil {
				t.Fatal(err)
			}
			inputSecret := "INPUT-SECRET-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			envSecret := "ENV-SECRET-" + strconv.FormatInt(time.Now().UnixNano()+1, 36)
			sid := must[string](t, "sessions.create")(c.NewSession(ctx))
			must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"leaker"}}))
			if tc.pool > 0 {
				// Let the pool boot its sandbox, so that the run is warm.
				time.Sleep(5 * time.Second)
			}
			files := []api.File{{Name: "input.txt", Content: base64.StdEncoding.EncodeToString([]byte(inputSecret + "\n")), Mode: 0o600}}
			env := map[string]string{"SECRET_TOKEN": envSecret}
			type outcome struct {
				res *api.RunScriptResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				var o outcome
				if tc.code {
					o.res, o.err = c.RunCode(ctx, api.Peer{}, api.RunCodeParams{RunInputs: api.RunInputs{SessionID: sid, Files: files, Env: env}, Language: api.LanguageShell, Code: leakerScript})
				} else {
					o.res, o.err = c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Files: files, Env: env}, Path: "scripts/leak.sh"})
				}
				done <- o
			}()
			var dirs []string
			waitfor.True(t, "the run to be ready", 3*time.Minute, func() bool {
				select {
				case o := <-done:
					t.Fatalf("the run ended before it was ready: %+v %v", o.res, o.err)
				default:
				}
				dirs = runDirsOf(inputSecret)
				return len(dirs) > 0
			})
			// A reachable run dir or snapshot would be a path below these:
			// the probe reports any it reaches.
			closed := []string{runtime.DefaultRunDir + "/", runner.DefaultSnapshotDir + "/"}
			spec := runtimetest.ProbeSpec{
				Walk:    []string{runtime.DefaultStateBase, d.base},
				IDs:     closed,
				Names:   []string{"input.txt", "secret.txt", "outputs/out.txt", "config.json"},
				Secrets: []string{inputSecret, envSecret, canarySecret},
				Paths:   []string{canary},
			}
			for _, dir := range dirs {
				for _, rel := range []string{"", "work", "work/input.txt", "work/secret.txt", "work/outputs/out.txt", "config.json", "skills", "skills/.code", "hosts", "watchdog.log", "runsc.log"} {
					spec.Paths = append(spec.Paths, filepath.Join(dir, rel))
				}
			}
			for _, uid := range []uint32{65534, 65533} {
				sawCanary := false
				for _, h := range runtimetest.RunProbe(t, bin, uid, spec) {
					under := false
					for _, c := range closed {
						under = under || strings.HasPrefix(h.Path, c)
					}
					switch {
					case h.Path == canary:
						sawCanary = sawCanary || h.Secret
					case h.Secret || under:
						t.Errorf("uid %d reached %s %s (secret %v)", uid, h.Op, h.Path, h.Secret)
					}
				}
				if !sawCanary {
					t.Errorf("uid %d: the probe did not read its control file", uid)
				}
			}
			select {
			case o := <-done:
				t.Fatalf("the run ended before the probes did: the test proves nothing (%+v %v)", o.res, o.err)
			default:
			}
			o := <-done
			if o.err != nil {
				t.Fatal(o.err)
			}
			if o.res.ExitCode != 0 {
				t.Errorf("run: exit %d, stderr %q", o.res.ExitCode, o.res.Stderr)
			}
			if (tc.pool > 0) != o.res.Warm {
				t.Logf("run warm %v with a pool of %d: the pool had no sandbox ready", o.res.Warm, tc.pool)
			}
		})
	}
}

// TestDaemonSessionFilesPrivate: while a session sandbox lives (a
// background run in it, the session's files in its /work) and after it
// was checkpointed, other real uids reach nothing of it: not the daemon's
// session-sandboxes or checkpoints directories (the box's skills, the
// checkpoint's memory image, manifest and /work copy), not its run dir,
// not the secret a run wrote.
func TestDaemonSessionFilesPrivate(t *testing.T) {
	needDaemon(t)
	d, c, ctx, sid := sessionDaemon(t, "")
	bin := copyForUID(t, os.Args[0], d.base)
	secret := "SESSION-SECRET-" + strings.ToUpper(strconv.FormatInt(time.Now().UnixNano(), 36))
	must[*api.RunScriptResult](t, "counter")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"8003"}, Background: true}, Path: "scripts/counter.py"}))
	files := []api.File{{Name: "in.txt", Content: base64.StdEncoding.EncodeToString([]byte(secret)), Mode: 0o600}}
	res := must[*api.RunScriptResult](t, "upper")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"in.txt", "kept.txt"}, Files: files}, Path: "scripts/upper.py"}))
	if res.ExitCode != 0 || res.SessionSandbox == "" {
		t.Fatalf("upper.py: %+v", res)
	}
	box := res.SessionSandbox
	sessDirs := filepath.Join(d.stateDir, "session-sandboxes")
	ckptDirs := filepath.Join(d.stateDir, "checkpoints")
	closed := []string{sessDirs + "/", ckptDirs + "/", runtime.DefaultRunDir + "/"}
	probe := func(when string) {
		t.Helper()
		// Every path there is (listed as root), tried directly as well.
		var paths []string
		for _, root := range []string{sessDirs, ckptDirs, filepath.Join(runtime.DefaultRunDir, box)} {
			_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
				if err == nil && len(paths) < 2000 {
					paths = append(paths, p)
				}
				return nil
			})
		}
		held := 0
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(secret)) {
				held++
			}
		}
		if held == 0 {
			t.Fatalf("%s: no file of the session holds its secret: the probe would prove nothing (%d paths)", when, len(paths))
		}
		spec := runtimetest.ProbeSpec{
			Walk:    []string{runtime.DefaultStateBase, d.base},
			IDs:     closed,
			Names:   []string{"in.txt", "kept.txt", "manifest.json"},
			Secrets: []string{secret},
			Paths:   paths,
		}
		for _, uid := range []uint32{65534, 65533} {
			for _, h := range runtimetest.RunProbe(t, bin, uid, spec) {
				if h.Path == sessDirs || h.Path == ckptDirs || h.Path == filepath.Join(runtime.DefaultRunDir, box) {
					if !h.Secret && h.Op == "stat" {
						continue // that it exists is no secret; what is in it is
					}
				}
				t.Errorf("%s: uid %d reached %s %s (secret %v)", when, uid, h.Op, h.Path, h.Secret)
			}
		}
	}
	probe("live session")
	paused := must[*api.PauseSessionResult](t, "pause")(c.PauseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
	if len(paused.Sandboxes) != 1 {
		t.Fatalf("pause: %+v", paused)
	}
	probe("checkpointed session")
	if got := strings.TrimSpace(must[*api.RunScriptResult](t, "fetch")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Args: []string{"8003"}}, Path: "scripts/fetch.py"})).Stdout); got != "1" {
		t.Errorf("after the resume the counter says %q, want 1", got)
	}
	probe("resumed session")
	must[*api.CloseSessionResult](t, "close")(c.CloseSession(ctx, api.Peer{}, api.SessionParams{SessionID: sid}))
}
