//go:build integration

package main

// Issue 22, finding 1, through the daemon: while root's run_script and
// run_code runs are in flight (cold, and warm from the pool), other real
// uids walk /run/skillbox and every process's root, cwd and descriptors,
// knowing the run ids (which ps shows), and reach nothing: no secret, no
// path inside a run dir or the skill snapshots.

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/service"
)

// dirProbeEnv makes this test binary the probe (dirProbeMain).
const dirProbeEnv = "SKILLBOX_IT_DIR_PROBE"

func init() {
	if raw := os.Getenv(dirProbeEnv); raw != "" {
		os.Exit(dirProbeMain(raw))
	}
}

type dirProbeSpec struct {
	Walk    []string
	Paths   []string
	Names   []string
	Secrets []string
}

type dirProbeHit struct {
	Op     string
	Path   string
	Secret bool `json:",omitempty"`
}

// dirProbeMain prints, as JSON lines, everything it could stat (walking
// Walk, and Paths), and every read that held a secret (files it found,
// Names under each process's root, cwd and directory descriptors).
func dirProbeMain(raw string) int {
	var spec dirProbeSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 2
	}
	enc := json.NewEncoder(os.Stdout)
	var total int64
	read := func(path string, f *os.File) {
		if total > 256<<20 {
			return
		}
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return
		}
		data, _ := io.ReadAll(io.LimitReader(f, 1<<20))
		total += int64(len(data))
		for _, s := range spec.Secrets {
			if bytes.Contains(data, []byte(s)) {
				_ = enc.Encode(dirProbeHit{Op: "read", Path: path, Secret: true})
			}
		}
	}
	open := func(path string) {
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
		if err == nil {
			read(path, f)
			f.Close()
		}
	}
	for _, root := range spec.Walk {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			_ = enc.Encode(dirProbeHit{Op: "stat", Path: path})
			if d.Type().IsRegular() {
				open(path)
			}
			return nil
		})
	}
	for _, p := range spec.Paths {
		if _, err := os.Lstat(p); err == nil {
			_ = enc.Encode(dirProbeHit{Op: "stat", Path: p})
			open(p)
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		for _, n := range spec.Names {
			for _, rel := range []string{"root/work/" + n, "cwd/" + n, "cwd/work/" + n} {
				open(filepath.Join(dir, rel))
			}
		}
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			fp := filepath.Join(dir, "fd", fd.Name())
			f, err := os.OpenFile(fp, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
			if err != nil {
				continue
			}
			if st, err := f.Stat(); err == nil && st.IsDir() {
				for _, n := range spec.Names {
					open(filepath.Join(fp, n))
				}
			} else {
				read(fp, f)
			}
			f.Close()
		}
	}
	return 0
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
					o.res, o.err = c.RunCode(ctx, api.Peer{}, api.RunCodeParams{SessionID: sid, Language: api.LanguageShell, Code: leakerScript, Files: files, Env: env})
				} else {
					o.res, o.err = c.RunScript(ctx, api.Peer{}, api.RunScriptParams{SessionID: sid, Path: "scripts/leak.sh", Files: files, Env: env})
				}
				done <- o
			}()
			var dirs []string
			deadline := time.Now().Add(3 * time.Minute)
			for len(dirs) == 0 {
				select {
				case o := <-done:
					t.Fatalf("the run ended before it was ready: %+v %v", o.res, o.err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the run was not ready within 3 minutes")
				}
				time.Sleep(100 * time.Millisecond)
				dirs = runDirsOf(inputSecret)
			}
			spec := dirProbeSpec{
				Walk:    []string{runtime.DefaultStateBase, d.base},
				Names:   []string{"input.txt", "secret.txt", "outputs/out.txt", "config.json"},
				Secrets: []string{inputSecret, envSecret, canarySecret},
				Paths:   []string{canary},
			}
			for _, dir := range dirs {
				for _, rel := range []string{"", "work", "work/input.txt", "work/secret.txt", "work/outputs/out.txt", "config.json", "skills", "skills/.code", "hosts", "watchdog.log", "runsc.log"} {
					spec.Paths = append(spec.Paths, filepath.Join(dir, rel))
				}
			}
			// A reachable run dir or snapshot would be a path below these.
			closed := []string{runtime.DefaultRunDir + "/", service.DefaultSnapshotDir + "/"}
			for _, uid := range []uint32{65534, 65533} {
				sawCanary := false
				for _, h := range runDirProbe(t, bin, uid, spec) {
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

// runDirProbe runs the probe as uid and returns what it reached.
func runDirProbe(t *testing.T, bin string, uid uint32, spec dirProbeSpec) []dirProbeHit {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", dirProbeEnv + "=" + string(raw)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe as uid %d: %v: %s", uid, err, stderr.String())
	}
	var hits []dirProbeHit
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var h dirProbeHit
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
			t.Fatalf("probe output %q: %v", sc.Text(), err)
		}
		hits = append(hits, h)
	}
	return hits
}
