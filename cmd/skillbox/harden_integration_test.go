//go:build integration

package main

// Hardening tests of a real `skillbox serve`: what must hold
// when the daemon dies, and when one uid floods it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/runtimetest"
	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// useRuntime switches a daemon under test (not yet started) to the named
// runtime, with a state dir of its own.
func (d *itDaemon) useRuntime(t *testing.T, name string) {
	t.Helper()
	if name == "runsc" {
		return
	}
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(cfg), "daemon {", "daemon {\n  runtime = \""+name+"\"", 1)
	s += "\nruntime \"" + name + "\" { state_dir = \"" + filepath.Join(d.base, name) + "\" }\n"
	if err := os.WriteFile(d.cfgPath, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runCgroupProcs lists the host processes in run job's cgroup, in every
// hierarchy.
func runCgroupProcs(job string) []int {
	var pids []int
	seen := map[int]bool{}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/skillbox/" + job)
	dirs = append(dirs, "/sys/fs/cgroup/skillbox/"+job)
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
			if err != nil || !de.IsDir() {
				return nil
			}
			raw, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(raw)) {
				if n, err := strconv.Atoi(f); err == nil && !seen[n] {
					seen[n] = true
					pids = append(pids, n)
				}
			}
			return nil
		})
	}
	return pids
}

// Kill -9 of the daemon in the middle of a run does not let
// the run outlive its time limit, though no daemon is started again: the
// run's watchdog kills it at the deadline. (Before the watchdog, the
// container went on for the script's whole 600 s.)
func TestDaemonKill9KeepsDeadline(t *testing.T) {
	needDaemon(t)
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			if rt == "runc" && !haveBinary("runc") {
				runtimetest.SkipUnlessRequired(t, "runc is not installed")
			}
			extra := extraSkill(t, "sleeper", "scripts/sleep.sh", "echo sleeping\nsleep 600\n")
			d := newItDaemon(t, extra)
			d.useRuntime(t, rt)
			d.start()
			c := d.client()
			ctx := ctxT(t)
			sid := must[string](t, "sessions.create")(c.NewSession(ctx))
			must[*api.LoadResult](t, "load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"sleeper"}}))

			const limit = 5 * time.Second
			runErr := make(chan error, 1)
			go func() {
				_, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, TimeoutMS: limit.Milliseconds()}, Path: "scripts/sleep.sh"})
				runErr <- err
			}()
			// Wait until the run is audited and its processes are in its
			// cgroup.
			jobOf := func(runID string) string { return "skillbox-" + strings.TrimPrefix(runID, "run_") }
			job := jobOf(d.waitRunStarted(t, sid, runErr, func(runID string) bool { return len(runCgroupProcs(jobOf(runID))) > 0 }))
			procs := func() string {
				var names []string
				for _, pid := range runCgroupProcs(job) {
					comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
					names = append(names, strings.TrimSpace(string(comm)))
				}
				return strings.Join(names, " ")
			}
			t.Logf("%s: processes of run %s before the kill: %s", rt, job, procs())
			d.kill9()
			killed := time.Now()
			<-runErr

			// No daemon runs now. The run's processes must be gone once
			// its limit (plus grace) is over; the bound here is generous
			// for a busy machine, and far below the script's 600 s.
			bound := killed.Add(limit + time.Minute)
			if !waitfor.Within(time.Until(bound), func() bool { return len(runCgroupProcs(job)) == 0 }) {
				t.Fatalf("%s: run %s still has processes %v in its cgroup %s after the daemon was killed, past its %s limit",
					rt, job, runCgroupProcs(job), time.Since(killed).Round(time.Second), limit)
			}

			t.Logf("%s: run gone %s after the daemon was killed", rt, time.Since(killed).Round(100*time.Millisecond))

			// A daemon started again sweeps what is left (container
			// state, run dir, cgroup) and works.
			d.start()
			c2 := d.client()
			if _, err := c2.Instructions(ctx, api.Peer{}, api.SessionParams{SessionID: sid}); err != nil {
				t.Errorf("instructions after the restart: %v", err)
			}
		})
	}
}

// floodSocketEnv makes this test binary a flooder (floodMain) instead of
// running tests: TestDaemonFloodOneUID starts it under another uid.
const floodSocketEnv = "SKILLBOX_IT_FLOOD_SOCKET"

// floodSummary is what the flooder reports on its stdout once it holds
// what it could get.
type floodSummary struct {
	Session string `json:"session"`
	Runs    int    `json:"runs"`    // run requests sent, each on its own connection
	Kept    int    `json:"kept"`    // connections the daemon kept open
	Refused int    `json:"refused"` // connections the daemon refused
}

// floodMain opens a session with the sleeper skill, asks for many long
// runs (one connection each) and then as many more connections as it can,
// reports, and holds everything until its stdin closes.
func floodMain(socket string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "flood:", err); return 1 }
	type conn struct {
		nc net.Conn
		br *bufio.Reader
	}
	dial := func() (*conn, error) {
		nc, err := net.Dial("unix", socket)
		if err != nil {
			return nil, err
		}
		return &conn{nc, bufio.NewReader(nc)}, nil
	}
	call := func(c *conn, id int, method, params string) (map[string]json.RawMessage, error) {
		fmt.Fprintf(c.nc, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", id, method, params)
		line, err := c.br.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, err
		}
		if e, ok := m["error"]; ok {
			return nil, fmt.Errorf("%s: %s", method, e)
		}
		return m, nil
	}
	var held []*conn
	c0, err := dial()
	if err != nil {
		return fail(err)
	}
	held = append(held, c0)
	m, err := call(c0, 1, "sessions.create", "{}")
	if err != nil {
		return fail(err)
	}
	var created struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(m["result"], &created); err != nil {
		return fail(err)
	}
	if _, err := call(c0, 2, "skills.load", `{"session_id":"`+created.SessionID+`","names":["sleeper"]}`); err != nil {
		return fail(err)
	}
	sum := floodSummary{Session: created.SessionID}
	// Long runs, far more than the uid's share of run slots and queue.
	for i := 0; i < 10; i++ {
		c, err := dial()
		if err != nil {
			break
		}
		held = append(held, c)
		fmt.Fprintf(c.nc, `{"jsonrpc":"2.0","id":1,"method":"skills.run_script","params":{"session_id":%q,"path":"scripts/sleep.sh","timeout_ms":300000}}`+"\n", created.SessionID)
		sum.Runs++
	}
	// Then connections, far more than max_connections: a refused one is
	// answered with an error and closed; a kept one stays silent.
	for i := 0; i < 100; i++ {
		c, err := dial()
		if err != nil {
			sum.Refused++
			continue
		}
		c.nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.br.ReadByte(); err == nil {
			sum.Refused++
			c.nc.Close()
			continue
		}
		c.nc.SetReadDeadline(time.Time{})
		held = append(held, c)
	}
	sum.Kept = len(held)
	if err := json.NewEncoder(os.Stdout).Encode(sum); err != nil {
		return fail(err)
	}
	io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		c.nc.Close()
	}
	return 0
}

// copyForUID copies a binary where another uid can run it.
func copyForUID(t *testing.T, src, dir string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// While one uid floods the daemon with connections
// and runs over real sockets, another uid still completes a run, and an
// approver still approves that uid's guarded run; the refused connections
// are in the audit log.
func TestDaemonFloodOneUID(t *testing.T) {
	needDaemon(t)
	sleeper := extraSkill(t, "sleeper", "scripts/sleep.sh", "sleep 600\n")
	quick := extraSkill(t, "quick", "scripts/quick.sh", "echo quick done\n")
	d := newItDaemon(t, sleeper, quick)
	d.start()
	ctx := ctxT(t)
	const flooder, other = 65534, 65533

	testBin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	flood := exec.Command(copyForUID(t, testBin, d.base))
	flood.Dir = "/"
	flood.Env = []string{"PATH=/usr/bin:/bin", floodSocketEnv + "=" + d.socket}
	flood.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: flooder, Gid: flooder}}
	var floodErr bytes.Buffer
	flood.Stderr = &floodErr
	stdin, err := flood.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := flood.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		flood.Process.Kill()
		flood.Wait()
	})
	var sum floodSummary
	if err := json.NewDecoder(stdout).Decode(&sum); err != nil {
		t.Fatalf("flooder: %v\n%s", err, floodErr.String())
	}
	t.Logf("flooder (uid %d): %d run requests, %d connections kept, %d refused", flooder, sum.Runs, sum.Kept, sum.Refused)
	if sum.Refused == 0 || sum.Kept > 16 {
		t.Errorf("one uid kept %d connections and had %d refused; want at most max_connections_per_uid (16) kept", sum.Kept, sum.Refused)
	}
	// The flooder's runs hold their share of the slots.
	waitfor.NoError(t, "the flooder's runs to start", 3*time.Minute, func() error {
		n := 0
		audit.Read(d.auditDir, func(r *audit.Record) error {
			if r.Event == audit.EventRunStart && r.Peer != nil && r.Peer.UID == flooder {
				n++
			}
			return nil
		})
		if n < 2 {
			return fmt.Errorf("%d started", n)
		}
		return nil
	})

	bin := copyForUID(t, itBin, d.base)
	as := func(uid uint32, method, params string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, "call", "--socket", d.socket, "--timeout", "3m", method, params)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out.String(), errb.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), 0
	}
	out, stderr, code := as(other, "sessions.create", "{}")
	var created api.CreateSessionResult
	if code != 0 || json.Unmarshal([]byte(out), &created) != nil {
		t.Fatalf("uid %d sessions.create during the flood: exit %d %s %s", other, code, out, stderr)
	}
	sid := created.SessionID
	if _, stderr, code = as(other, "skills.load", `{"session_id":"`+sid+`","names":["quick","guarded-deploy"]}`); code != 0 {
		t.Fatalf("uid %d skills.load: exit %d %s", other, code, stderr)
	}
	out, stderr, code = as(other, "skills.run_script", `{"session_id":"`+sid+`","skill":"quick","path":"scripts/quick.sh"}`)
	if code != 0 || !strings.Contains(out, "quick done") {
		t.Fatalf("uid %d could not complete a run during the flood: exit %d\n%s\n%s", other, code, out, stderr)
	}

	// A guarded run of the other uid waits for an approver; root approves
	// it during the flood, and the run completes.
	deploy := `{"session_id":"` + sid + `","skill":"guarded-deploy","path":"scripts/deploy.sh","args":["api","staging"]`
	if _, stderr, code = as(other, "skills.run_script", deploy+"}"); code == 0 || !strings.Contains(stderr, "confirmation_required") {
		t.Fatalf("guarded run: exit %d, stderr %q; want confirmation_required", code, stderr)
	}
	root := d.client()
	var confID string
	for _, cf := range must[*api.ListConfirmationsResult](t, "confirmations.list")(root.ListConfirmations(ctx, api.Peer{}, api.ListConfirmationsParams{})).Confirmations {
		if cf.RequestedBy == other && cf.State == api.ConfirmationPending {
			confID = cf.ID
		}
	}
	if confID == "" {
		t.Fatal("the approver does not see the other uid's confirmation")
	}
	must[*api.Confirmation](t, "approve during the flood")(root.ApproveConfirmation(ctx, api.Peer{}, api.ConfirmationIDParams{ID: confID}))
	if out, stderr, code = as(other, "skills.run_script", deploy+`,"confirmation_id":"`+confID+`"}`); code != 0 {
		t.Fatalf("approved run during the flood: exit %d\n%s\n%s", code, out, stderr)
	}

	// Refused connections are audited, aggregated per uid.
	stdin.Close()
	d.stop()
	refusedConns := 0
	for _, r := range d.records() {
		if r.Event == audit.EventCallRefused && r.Peer != nil && r.Peer.UID == flooder && r.Detail["what"] == "connection" {
			n, _ := strconv.Atoi(r.Detail["connections"])
			refusedConns += n
		}
	}
	if refusedConns == 0 {
		t.Errorf("no audit record of the flooder's %d refused connections", sum.Refused)
	}
}
