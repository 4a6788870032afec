package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/audit/audittest"
)

func runAudit(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	out, errText, code, err := runAuditContext(context.Background(), args...)
	if err != nil {
		t.Fatalf("unexpected error %v", err)
	}
	return out, errText, code
}

// runAuditContext runs `skillbox audit ARGS` until it returns or ctx ends
// (which stops a follow as an interrupt does). err is an error that is not
// an exit code.
func runAuditContext(ctx context.Context, args ...string) (string, string, int, error) {
	app := newApp()
	var out, errw bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errw
	err := app.RunContext(ctx, append([]string{"skillbox", "audit"}, args...))
	code := 0
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) {
			return "", "", 0, err
		}
		code = ee.code
		errw.WriteString(ee.msg)
	}
	return out.String(), errw.String(), code, nil
}

// auditFixture writes a small signed log: a session, a decision, a run
// (whose error text tries to fake a table row) and a refused caller.
func auditFixture(t *testing.T) (dir, pub, cps string) {
	t.Helper()
	peer := &api.Peer{UID: 1000, GID: 1000, PID: 42, Process: "host"}
	code := 3
	return audittest.SignedLog(t, []*audit.Record{
		{Event: audit.EventSessionCreate, Peer: peer, SessionID: "s1"},
		{Event: audit.EventDecision, Peer: peer, SessionID: "s1", Skill: &audit.SkillRef{Name: "pdf"}, Decision: &audit.DecisionInfo{Tool: "skills.run_script", Effect: "allow", Rule: "pdf-ok"}},
		{Event: audit.EventRunStart, Peer: peer, SessionID: "s1", Skill: &audit.SkillRef{Name: "pdf"}, Run: &audit.RunInfo{Script: "scripts/x.py"}},
		{Event: audit.EventRunEnd, Peer: peer, SessionID: "s1", Skill: &audit.SkillRef{Name: "pdf"}, Run: &audit.RunInfo{Script: "scripts/x.py", ExitCode: &code, Reason: "exit"},
			Outcome: "exit", Error: "boom\n2099-01-01T00:00:00Z  1  run.end  0  fake  \x1b[2J"},
		{Event: audit.EventAuthRefused, Peer: &api.Peer{UID: 4242, PID: 7}, Outcome: "refused", Error: "uid not allowed"},
	})
}

func TestAuditVerifyCommand(t *testing.T) {
	dir, pub, cps := auditFixture(t)
	out, errText, code := runAudit(t, "verify", "--dir", dir, "--pubkey", pub, "--checkpoints", cps)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errText)
	}
	for _, w := range []string{"intact", "records", "7 (seq 1 to 7)", "head", "1 in the log (signatures verified); 1 from"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout lacks %q:\n%s", w, out)
		}
	}
	out, _, code = runAudit(t, "verify", "--dir", dir, "--json")
	var v struct {
		OK     bool
		Report struct{ Records int }
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || !v.OK || v.Report.Records != 7 {
		t.Fatalf("--json: exit %d\n%s", code, out)
	}

	// Change one byte of seq 3.
	p := filepath.Join(dir, "audit-000001.jsonl")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, bytes.Replace(b, []byte(`"pdf-ok"`), []byte(`"pdf-OK"`), 1), 0o640)
	out, errText, code = runAudit(t, "verify", "--dir", dir)
	if code != 1 || !strings.Contains(errText, "first bad seq 3: changed record") || !strings.Contains(out, "NOT intact") {
		t.Fatalf("tampered: exit %d\n%s\n%s", code, out, errText)
	}

	// Usage errors.
	if _, e, c := runAudit(t, "verify", "--dir", dir, "--checkpoints", cps); c != 2 || !strings.Contains(e, "needs --pubkey") {
		t.Fatalf("exit %d %s", c, e)
	}
	if _, e, c := runAudit(t, "verify", "--dir", t.TempDir()); c != 1 || !strings.Contains(e, "no audit log") {
		t.Fatalf("exit %d %s", c, e)
	}
}

func TestAuditQueryCommand(t *testing.T) {
	dir, _, _ := auditFixture(t)
	out, errText, code := runAudit(t, "query", "--dir", dir, "--session", "s1")
	if code != 0 {
		t.Fatalf("exit %d %s", code, errText)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(out, "pdf:scripts/x.py") || !strings.Contains(out, "allow rule=pdf-ok") {
		t.Fatalf("table:\n%s", out)
	}
	// The run's error text is shown escaped, never as a row of its own.
	if strings.Contains(out, "\x1b") || !strings.Contains(out, `exit 3: boom\n2099`) {
		t.Fatalf("untrusted text printed raw:\n%q", out)
	}
	cols := strings.Index(lines[0], "EVENT")
	for _, ln := range lines[1:] {
		if !strings.HasPrefix(ln[cols:], "session.") && !strings.HasPrefix(ln[cols:], "policy.") && !strings.HasPrefix(ln[cols:], "run.") {
			t.Fatalf("columns not aligned:\n%s", out)
		}
	}

	out, _, code = runAudit(t, "query", "--dir", dir, "--uid", "4242", "--json")
	var r audit.Record
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Event != audit.EventAuthRefused {
		t.Fatalf("--uid --json: %d %s", code, out)
	}
	out, _, _ = runAudit(t, "query", "--dir", dir, "--event", "run", "--skill", "pdf", "--since", "1h", "--until", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if n := strings.Count(out, "\n"); n != 3 {
		t.Fatalf("run records: %d lines\n%s", n, out)
	}
	if _, e, c := runAudit(t, "query", "--dir", dir, "--since", "yesterday"); c != 2 || !strings.Contains(e, "--since") {
		t.Fatalf("bad --since: %d %s", c, e)
	}
	if _, e, c := runAudit(t, "query", "--dir", dir, "--uid", "root"); c != 2 {
		t.Fatalf("bad --uid: %d %s", c, e)
	}
}

func TestAuditTailExportKeygen(t *testing.T) {
	dir, _, _ := auditFixture(t)
	out, _, code := runAudit(t, "tail", "--dir", dir, "-n", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(lines[1], "auth.refused") || !strings.Contains(lines[2], "audit.checkpoint") {
		t.Fatalf("tail -n 2: %d\n%s", code, out)
	}

	outFile := filepath.Join(t.TempDir(), "siem.jsonl")
	_, errText, code := runAudit(t, "export", "--dir", dir, "--event", "run.end", "-o", outFile)
	b, _ := os.ReadFile(outFile)
	var m map[string]any
	if code != 0 || json.Unmarshal(b, &m) != nil || m["run.exit_code"] != float64(3) || m["peer.uid"] != float64(1000) || !strings.Contains(errText, "exported 1") {
		t.Fatalf("export: %d %s %s", code, errText, b)
	}

	key := filepath.Join(t.TempDir(), "k")
	out, _, code = runAudit(t, "keygen", key)
	if code != 0 || !strings.Contains(out, "key id") {
		t.Fatalf("keygen: %d %s", code, out)
	}
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode: %v %v", st.Mode(), err)
	}
	if _, e, c := runAudit(t, "keygen", key); c != 1 || !strings.Contains(e, "refusing to overwrite") {
		t.Fatalf("keygen over a key: %d %s", c, e)
	}
	if _, _, c := runAudit(t, "keygen"); c != 2 {
		t.Fatalf("keygen without FILE: %d", c)
	}
}

func TestParseWhen(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2025-01-02T03:04:05Z":      time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		"2025-01-02T03:04:05+02:00": time.Date(2025, 1, 2, 1, 4, 5, 0, time.UTC),
		"2025-01-02":                time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC),
		"2025-01-02 03:04":          time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC),
		"90m":                       now.Add(-90 * time.Minute),
		"7d":                        now.Add(-7 * 24 * time.Hour),
	} {
		got, err := audit.ParseWhen(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("%s: %v %v, want %v", in, got, err, want)
		}
	}
	if _, err := audit.ParseWhen("soon", now); err == nil {
		t.Error("accepted nonsense")
	}
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"plain text":    "plain text",
		"a\nb":          `a\nb`,
		"\x1b[31mred":   `\x1b[31mred`,
		"rtl\u202eevil": `rtl\u202eevil`,
		"ls\u2028x":     `ls\u2028x`,
		"tab\there":     `tab\there`,
		"naïve ünïcode": "naïve ünïcode",
	} {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAuditExportFormats(t *testing.T) {
	dir, _, _ := auditFixture(t)
	for _, c := range []struct {
		format, key, want string
	}{
		{"ocsf", "class_uid", "1007"},
		{"ecs", "ecs", `map[version:8.11.0]`},
		{"json", "run.exit_code", "3"},
	} {
		t.Run(c.format, func(t *testing.T) {
			out, errText, code := runAudit(t, "export", "--dir", dir, "--event", "run.end", "--format", c.format)
			var m map[string]any
			if code != 0 || json.Unmarshal([]byte(out), &m) != nil || fmt.Sprint(m[c.key]) != c.want {
				t.Fatalf("exit %d %s\n%s", code, errText, out)
			}
			if !strings.Contains(errText, "exported 1 record(s) as "+map[string]string{"ocsf": "OCSF 1.3.0", "ecs": "ECS 8.11.0", "json": "flat JSON"}[c.format]) {
				t.Fatalf("stderr: %s", errText)
			}
		})
	}
	out, _, code := runAudit(t, "export", "--dir", dir, "--format", "ocsf")
	if n := strings.Count(out, "\n"); code != 0 || n != 7 {
		t.Fatalf("all records: exit %d, %d lines", code, n)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "cef"}, "unknown format"},
		{[]string{"-o", "x", "--syslog", "/dev/log"}, "not both"},
		{[]string{"-n", "3"}, "-n needs -f"},
		{[]string{"--syslog", "udp:192.0.2.1:514"}, "loopback"},
	} {
		if _, e, code := runAudit(t, append([]string{"export", "--dir", dir}, c.args...)...); code == 0 || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d %s", c.args, code, e)
		}
	}
}

// TestAuditExportFollow follows a log being written, to a file and to a
// syslog listener on a unix datagram socket.
func TestAuditExportFollow(t *testing.T) {
	dir := t.TempDir()
	l, err := audit.Open(dir, audit.Options{CheckpointEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sock, nextDatagram := audittest.SyslogSocket(t)
	outFile := filepath.Join(t.TempDir(), "siem.jsonl")

	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		errText string
		code    int
		err     error
	}
	results := make(chan result, 2)
	// The records are appended first and the followers start with the
	// last 2 (-n 2), so no wait for them to start is needed.
	code := 0
	for _, r := range []*audit.Record{
		{Event: audit.EventSessionCreate, Peer: &api.Peer{UID: 1000}, SessionID: "s1"},
		{Event: audit.EventRunEnd, SessionID: "s1", Run: &audit.RunInfo{Script: "scripts/x.py", ExitCode: &code}},
	} {
		if err := l.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"-f", "-n", "2", "--format", "ecs", "--output", outFile},
		{"--follow", "-n", "2", "--format", "ocsf", "--syslog", "unixgram:" + sock, "--event", "run"},
	} {
		go func() {
			_, e, code, err := runAuditContext(ctx, append([]string{"export", "--dir", dir}, args...)...)
			results <- result{e, code, err}
		}()
	}
	// The run.end arrives at the syslog listener as one RFC 5424 message.
	msg := string(nextDatagram())
	if !strings.HasPrefix(msg, "<110>1 ") || !strings.Contains(msg, " skillbox - run.end - {") || !strings.Contains(msg, `"class_uid":1007`) {
		t.Fatalf("syslog message: %q", msg)
	}
	// Both records reach the file.
	var lines []string
	waitfor.Within(10*time.Second, func() bool {
		b, _ := os.ReadFile(outFile)
		lines = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		return len(lines) >= 2
	})
	cancel()
	for range 2 {
		r := <-results
		if r.err != nil || r.code != 0 {
			t.Fatalf("follow: exit %d %v %s", r.code, r.err, r.errText)
		}
	}
	if len(lines) != 2 || !strings.Contains(lines[0], `"action":"session.create"`) || !strings.Contains(lines[1], `"action":"run.end"`) {
		t.Fatalf("file:\n%s", strings.Join(lines, "\n"))
	}
}
