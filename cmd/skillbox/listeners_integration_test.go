//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/doors/console"
)

// listenerFloodEnv makes this test binary a connection flooder of one HTTP
// socket (listenerFloodMain); listenerProbeEnv a prober that times calls
// (listenerProbeMain). Both run as another uid.
const (
	listenerFloodEnv = "SKILLBOX_IT_LISTENER_FLOOD"
	listenerProbeEnv = "SKILLBOX_IT_LISTENER_PROBE"
)

// listenerFloodSummary is what a flooder reports once it has dialled.
type listenerFloodSummary struct {
	Dialled, Failed, Refused503, Open int
}

// listenerFloodMain dials socket n times (SKILLBOX_IT_LISTENER_FLOOD =
// "socket,n"), a third each of idle keep-alive connections (one request
// answered, then silence), half-open ones (nothing sent) and slowloris ones
// (a request head trickled a line a second). It prints a "flooding" line
// after the first 500, a summary when done, and holds every connection
// until its stdin closes.
func listenerFloodMain(spec string) int {
	sock, nstr, _ := strings.Cut(spec, ",")
	n, _ := strconv.Atoi(nstr)
	// Each connection has a reader that notes a 503 and the daemon's close.
	type held struct {
		net.Conn
		refused, closed atomic.Bool
	}
	var (
		conns []*held
		sum   listenerFloodSummary
	)
	stop := make(chan struct{})
	for i := 0; i < n; i++ {
		if i == 500 {
			fmt.Println("flooding")
		}
		nc, err := net.DialTimeout("unix", sock, 2*time.Second)
		sum.Dialled++
		if err != nil {
			sum.Failed++
			continue
		}
		c := &held{Conn: nc}
		conns = append(conns, c)
		go func() {
			var head [12]byte
			k, _ := io.ReadFull(c, head[:])
			c.refused.Store(bytes.HasPrefix(head[:k], []byte("HTTP/1.1 503")))
			io.Copy(io.Discard, c)
			c.closed.Store(true)
		}()
		switch i % 3 {
		case 0: // idle keep-alive: one request, then silence
			fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: skillbox\r\n\r\n")
		case 1: // half-open: a connection that never says a word
		case 2: // slowloris: a request head trickled a line a second
			go func() {
				fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\n")
				for j := 0; ; j++ {
					select {
					case <-stop:
						return
					case <-time.After(time.Second):
					}
					if _, err := fmt.Fprintf(c, "X-Slow-%d: x\r\n", j); err != nil {
						return
					}
				}
			}()
		}
	}
	// What the daemon made of them a second later.
	time.Sleep(time.Second)
	for _, c := range conns {
		// A refusal is a 503 and a close (the metrics handler's own 503
		// for too many scrapes in flight keeps the connection).
		if c.refused.Load() && c.closed.Load() {
			sum.Refused503++
		}
		if !c.closed.Load() {
			sum.Open++
		}
	}
	json.NewEncoder(os.Stdout).Encode(sum)
	io.Copy(io.Discard, os.Stdin)
	close(stop)
	for _, c := range conns {
		c.Close()
	}
	return 0
}

// listenerProbeMain makes n calls of each kind (SKILLBOX_IT_LISTENER_PROBE
// = "main-socket,console-socket,n"): sessions.create on the main socket,
// GET /api/v1/confirmations on the console socket, each on a new
// connection, and prints their durations in microseconds as JSON.
func listenerProbeMain(spec string) int {
	parts := strings.Split(spec, ",")
	n, _ := strconv.Atoi(parts[2])
	out, err := probeListeners(parts[0], parts[1], n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(out)
	return 0
}

// listenerProbe is the durations of a prober's calls, by kind.
type listenerProbe struct {
	Create, Console []time.Duration
}

// dialRetry dials a Unix socket, trying again while its accept queue is
// full (EAGAIN: the kernel's "try again", which a flood of connects can
// cause for a moment), as a client should; the wait counts in the call's
// time.
func dialRetry(ctx context.Context, sock string) (net.Conn, error) {
	for {
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
		if !errors.Is(err, syscall.EAGAIN) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Millisecond):
		}
	}
}

func probeListeners(mainSock, consoleSock string, n int) (*listenerProbe, error) {
	var p listenerProbe
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialRetry(ctx, consoleSock)
		},
	}}
	for i := 0; i < n; i++ {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c, err := dialRetry(ctx, mainSock)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("dial the main socket: %w", err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, `{"jsonrpc":"2.0","id":1,"method":"sessions.create","params":{}}`+"\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || !strings.Contains(line, "session_id") {
			return nil, fmt.Errorf("sessions.create: %q, %v", line, err)
		}
		p.Create = append(p.Create, time.Since(start))

		start = time.Now()
		resp, err := hc.Get("http://skillbox" + console.Prefix + "/confirmations")
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("console: %d %s", resp.StatusCode, body)
		}
		p.Console = append(p.Console, time.Since(start))
	}
	return &p, nil
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// vmRSS reads a process's resident memory.
func vmRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// Acceptance: 20,000 idle, half-open and slowloris connections from one
// uid on the console and metrics sockets leave another uid's and an
// approver's calls at their normal latency (p50 at most 3x the baseline
// taken before the flood in the same test), the daemon's RSS within 64 MiB
// of where it was, and every refused connection audited.
func TestDaemonListenerFlood(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t)
	metricsSock := filepath.Join(d.base, "run", "metrics.sock")
	cfg, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	withMetrics := strings.Replace(string(cfg), "daemon {\n", "daemon {\n  metrics     = \"unix:"+metricsSock+"\"\n", 1)
	if err := os.WriteFile(d.cfgPath, []byte(withMetrics), 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	d.mu.Lock()
	pid := d.cmd.Process.Pid
	d.mu.Unlock()
	consoleSock := console.ConsoleSocket(d.socket)
	const flooder, other = 65534, 65533
	testBin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := copyForUID(t, testBin, d.base)

	probe := func(uid uint32, n int) *listenerProbe {
		t.Helper()
		if uid == 0 {
			p, err := probeListeners(d.socket, consoleSock, n)
			if err != nil {
				t.Fatalf("the approver's calls: %v", err)
			}
			return p
		}
		cmd := exec.Command(bin)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin", listenerProbeEnv + "=" + d.socket + "," + consoleSock + "," + strconv.Itoa(n)}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		var p listenerProbe
		if err != nil || json.Unmarshal(out, &p) != nil {
			t.Fatalf("uid %d's calls: %v %s", uid, err, errb.String())
		}
		return &p
	}
	const calls = 40
	// Warm up (the first calls pay for lookups), then the baselines.
	probe(0, 5)
	probe(other, 5)
	baseRoot, baseOther := probe(0, calls), probe(other, calls)
	rssBefore := vmRSS(t, pid)

	// The flood: one process per socket, each dialling 10,000 times (the
	// machine's descriptor limit is 20,000 a process).
	type flood struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
		errb  *bytes.Buffer
	}
	var floods []*flood
	for _, sock := range []string{consoleSock, metricsSock} {
		cmd := exec.Command(bin)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin", listenerFloodEnv + "=" + sock + ",10000"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: flooder, Gid: flooder}}
		f := &flood{cmd: cmd, errb: &bytes.Buffer{}}
		cmd.Stderr = f.errb
		if f.stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		f.out = bufio.NewReader(stdout)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
		floods = append(floods, f)
	}
	peak := rssBefore
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-sampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil && bytes.Contains(b, []byte("VmRSS")) {
				if r := vmRSS(t, pid); r > peak {
					peak = r
				}
			}
		}
	}()
	for _, f := range floods {
		if line, err := f.out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "flooding" {
			t.Fatalf("flooder: %q %v\n%s", line, err, f.errb.String())
		}
	}
	// During the flood (the flooders go on dialling, the slow heads trickle).
	floodRoot, floodOther := probe(0, calls), probe(other, calls)
	refusedByFlooder := 0
	for _, f := range floods {
		var sum listenerFloodSummary
		if err := json.NewDecoder(f.out).Decode(&sum); err != nil {
			t.Fatalf("flooder: %v\n%s", err, f.errb.String())
		}
		t.Logf("flooder on %s: %+v", filepath.Base(f.cmd.Env[1]), sum)
		refusedByFlooder += sum.Refused503
		if sum.Open > 16 {
			t.Errorf("one uid held %d connections open on one socket; want at most daemon.max_connections_per_uid (16)", sum.Open)
		}
	}
	// And once more with every connection the flooders kept still held.
	afterRoot, afterOther := probe(0, calls), probe(other, calls)
	close(sampling)
	<-sampled

	// While the flooders dial, their dial loops and the daemon's refusals
	// take the machine's CPU, which any local process could; the calls must
	// complete. With the flood's connections held (idle, half-open, slow
	// heads trickling) they must be as fast as before it: p50 at most 3x
	// the baseline (with a 2 ms floor on it, for a busy two-core machine).
	floor := func(d time.Duration) time.Duration { return max(d, 2*time.Millisecond) }
	for _, c := range []struct {
		who                   string
		base, dialling, after []time.Duration
	}{
		{"approver sessions.create", baseRoot.Create, floodRoot.Create, afterRoot.Create},
		{"approver console", baseRoot.Console, floodRoot.Console, afterRoot.Console},
		{"other uid sessions.create", baseOther.Create, floodOther.Create, afterOther.Create},
		{"other uid console", baseOther.Console, floodOther.Console, afterOther.Console},
	} {
		b, during, held := p50(c.base), p50(c.dialling), p50(c.after)
		t.Logf("%s: p50 %v before the flood, %v while it dials, %v while its connections are held", c.who, b, during, held)
		if held > 3*floor(b) {
			t.Errorf("%s: p50 %v with the flood's connections held, over 3x the %v before it", c.who, held, b)
		}
	}
	t.Logf("daemon RSS %d MiB before the flood, peak %d MiB during it", rssBefore>>20, peak>>20)
	if peak > rssBefore+64<<20 {
		t.Errorf("daemon RSS grew from %d MiB to %d MiB under the flood; want at most 64 MiB more", rssBefore>>20, peak>>20)
	}
	// Every refusal is audited, aggregated per uid (flushed at stop).
	for _, f := range floods {
		f.stdin.Close()
	}
	d.stop()
	audited := 0
	for _, r := range d.records() {
		if r.Event == audit.EventCallRefused && r.Peer != nil && r.Peer.UID == flooder && r.Detail["what"] == "connection" {
			n, _ := strconv.Atoi(r.Detail["connections"])
			audited += n
		}
	}
	t.Logf("%d refused connections answered 503, %d audited", refusedByFlooder, audited)
	if audited < refusedByFlooder {
		t.Errorf("%d of the flooder's refused connections are audited; want all %d", audited, refusedByFlooder)
	}
}
