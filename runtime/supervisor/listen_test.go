package supervisor_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/supervisor"
	"github.com/skillbox/skillbox/runtime/waitfor"
)

// The listener tests run the real supervisor natively as a network agent:
// this test binary started again with envServe=listen serves ServeListener
// on a TLS loopback listener that requires a client certificate of the
// test's CA, and Authorize takes only the common name "daemon".
const (
	envListenDir  = "SKILLBOX_TEST_LISTEN_DIR"
	envListenOpts = "SKILLBOX_TEST_LISTEN_OPTS"
	daemonName    = "daemon"
)

// agentOpts are the agent's ListenOptions, as the test passes them.
type agentOpts struct {
	Idle, Handshake time.Duration
	MaxPending      int
}

// serveListen is the agent's side (TestMain).
func serveListen() error {
	dir := os.Getenv(envListenDir)
	var o agentOpts
	if err := json.Unmarshal([]byte(os.Getenv(envListenOpts)), &o); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"))
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	})
	if err != nil {
		return err
	}
	return supervisor.ServeListener(context.Background(), ln, supervisor.Options{
		RunsDir:      os.Getenv(envRunsDir),
		DrainTimeout: 300 * time.Millisecond,
		Logf:         func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	}, supervisor.ListenOptions{
		Authorize: func(nc net.Conn) error {
			certs := nc.(*tls.Conn).ConnectionState().PeerCertificates
			if len(certs) == 0 || certs[0].Subject.CommonName != daemonName {
				return errors.New("not the daemon")
			}
			return nil
		},
		HandshakeTimeout: o.Handshake,
		MaxPending:       o.MaxPending,
		IdleTimeout:      o.Idle,
	})
}

// ca is a throwaway certificate authority.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

var serial int64 = 1

// issue makes a certificate for cn: a server's for 127.0.0.1, else a
// client's. It returns it as tls wants it and as PEM files want it.
func (c *ca) issue(t *testing.T, cn string, server bool) (tls.Certificate, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	tc, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return tc, certPEM, keyPEM
}

// agent is a supervisor serving on a TLS loopback listener.
type agent struct {
	addr    string
	pid     int
	runsDir string
	ca      *ca
	daemon  tls.Certificate // a client certificate Authorize takes
	exited  chan struct{}
	cmd     *exec.Cmd

	mu  sync.Mutex
	log bytes.Buffer // its stderr
}

// startAgent starts an agent with o.
func startAgent(t *testing.T, o agentOpts) *agent {
	t.Helper()
	dir := t.TempDir()
	a := &agent{runsDir: filepath.Join(dir, "runs"), ca: newCA(t, "skillbox test CA"), exited: make(chan struct{})}
	_, srvPEM, srvKey := a.ca.issue(t, "agent", true)
	a.daemon, _, _ = a.ca.issue(t, daemonName, false)
	for name, b := range map[string][]byte{"server.pem": srvPEM, "server.key": srvKey, "ca.pem": a.ca.pem} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	opts, _ := json.Marshal(o)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envServe+"=listen", envListenDir+"="+dir, envListenOpts+"="+string(opts), envRunsDir+"="+a.runsDir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.cmd, a.pid = cmd, cmd.Process.Pid
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			a.mu.Lock()
			a.log.WriteString(line + "\n")
			a.mu.Unlock()
			if s, ok := strings.CutPrefix(line, "supervisor: listening on "); ok {
				addr <- s
			}
		}
		cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-a.exited
		if t.Failed() {
			t.Logf("agent's log:\n%s", a.logText())
		}
	})
	select {
	case a.addr = <-addr:
	case <-a.exited:
		t.Fatalf("the agent ended: %s", a.logText())
	case <-time.After(30 * time.Second):
		t.Fatal("the agent does not listen")
	}
	return a
}

func (a *agent) logText() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log.String()
}

// tlsConfig is a client's configuration with cert (none: nil).
func (a *agent) tlsConfig(cert *tls.Certificate) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(a.ca.cert)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}

// exits collects the exits a client gets of runs it did not start.
type exits struct {
	mu sync.Mutex
	m  map[string]supervisor.Exit
}

func (e *exits) on(id string, x supervisor.Exit) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]supervisor.Exit{}
	}
	e.m[id] = x
}

func (e *exits) get(id string) (supervisor.Exit, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[id]
	return x, ok
}

// dial connects as the daemon.
func (a *agent) dial(t *testing.T, opts ...supervisor.ClientOption) *supervisor.Client {
	t.Helper()
	c, err := supervisor.Dial(ctxT(t), "tcp", a.addr, a.tlsConfig(&a.daemon), opts...)
	if err != nil {
		t.Fatalf("dial the agent: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// runOn runs req in the foreground through c.
func runOn(t *testing.T, c *supervisor.Client, req supervisor.Request) (string, supervisor.Exit) {
	t.Helper()
	var out bytes.Buffer
	r, err := c.Start(ctxT(t), req, &out, nil)
	if err != nil {
		t.Fatalf("start %q: %v", req.Argv, err)
	}
	wait(t, r)
	return out.String(), r.Exit()
}

func findRun(runs []supervisor.RunStatus, id string) (supervisor.RunStatus, bool) {
	for _, r := range runs {
		if r.ID == id {
			return r, true
		}
	}
	return supervisor.RunStatus{}, false
}

func TestListenRuns(t *testing.T) {
	a := startAgent(t, agentOpts{})
	c := a.dial(t)
	h, err := c.Ready(ctxT(t))
	if err != nil || h.Version != supervisor.Version || h.PID != a.pid {
		t.Fatalf("hello %+v, %v: want version %d and pid %d", h, err, supervisor.Version, a.pid)
	}
	out, e := runOn(t, c, supervisor.Request{ID: id(), Argv: []string{"sh", "-c", "echo over the wire; exit 5"}, Env: testEnv})
	if out != "over the wire\n" || e.Code != 5 {
		t.Errorf("got %q %+v", out, e)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, several stdin parts
	out, e = runOn(t, c, supervisor.Request{ID: id(), Argv: []string{"cat"}, Env: testEnv, Stdin: big})
	if out != string(big) || e.Code != 0 {
		t.Errorf("cat: %d bytes, exit %+v; want %d bytes back", len(out), e, len(big))
	}
	if st, err := c.Status(ctxT(t)); err != nil || st.Version != supervisor.Version {
		t.Errorf("status %+v, %v", st, err)
	}
}

// TestListenTakeover: a second connection takes over; the first one is
// closed, its foreground run is killed and listed with a reason, and its
// background run lives on and its exit reaches the new client.
func TestListenTakeover(t *testing.T) {
	a := startAgent(t, agentOpts{})
	first := a.dial(t)
	bg, err := first.Start(ctxT(t), supervisor.Request{ID: "bg", Argv: []string{"sleep", "1000"}, Env: testEnv, Background: true, Log: filepath.Join(a.runsDir, "bg.log")}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fg, err := first.Start(ctxT(t), supervisor.Request{ID: "fg", Argv: []string{"sleep", "1000"}, Env: testEnv}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}

	var ex exits
	second := a.dial(t, supervisor.WithOnExit(ex.on))
	select {
	case <-first.Dead():
		if err := first.Err(); !errors.Is(err, supervisor.ErrGone) || !strings.Contains(err.Error(), "took over") {
			t.Errorf("the first client died of %v, want it told another took over", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first connection was not closed")
	}
	<-fg.Done()
	waitGone(t, fg.PID(), "the first connection's foreground run")
	if !alive(bg.PID()) {
		t.Fatal("the background run did not survive the takeover")
	}

	var runs []supervisor.RunStatus
	waitfor.Within(10*time.Second, func() bool {
		runs, err = second.List(ctxT(t))
		r, ok := findRun(runs, "fg")
		return err == nil && ok && !r.Running
	})
	if r, ok := findRun(runs, "bg"); !ok || !r.Running || !r.Background || r.PID != bg.PID() {
		t.Errorf("list %+v: want bg running", runs)
	}
	r, ok := findRun(runs, "fg")
	if !ok || r.Running || r.Exit == nil || r.Exit.Signal != "SIGKILL" || !strings.Contains(r.Reason, "took over") {
		t.Errorf("list %+v: want fg killed because another connection took over", runs)
	}

	if err := second.Signal(ctxT(t), "bg", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !waitfor.Within(10*time.Second, func() bool { _, ok := ex.get("bg"); return ok }) {
		t.Fatal("the background run's exit did not reach the new client")
	}
	if e, _ := ex.get("bg"); e.Code != 143 || e.Signal != "SIGTERM" {
		t.Errorf("bg exit %+v", e)
	}
	// The first client's calls fail; the second one's do not.
	if err := first.Ping(ctxT(t)); !errors.Is(err, supervisor.ErrGone) {
		t.Errorf("ping on the closed client: %v", err)
	}
	if err := second.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	// When the client in control goes away, its foreground runs are
	// killed too, for the other reason.
	fg2, err := second.Start(ctxT(t), supervisor.Request{ID: "fg2", Argv: []string{"sleep", "1000"}, Env: testEnv}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	second.Close()
	waitGone(t, fg2.PID(), "the closed connection's foreground run")
	third := a.dial(t)
	runs, err = third.List(ctxT(t))
	if r, ok := findRun(runs, "fg2"); err != nil || !ok || r.Running || !strings.Contains(r.Reason, "the connection that started it") {
		t.Errorf("list %+v, %v: want fg2 killed because its connection ended", runs, err)
	}
}

// TestListenRefused: a connection without a certificate Authorize takes
// is refused, and the client in control does not notice.
func TestListenRefused(t *testing.T) {
	a := startAgent(t, agentOpts{Handshake: 2 * time.Second})
	ctrl := a.dial(t)
	bg, err := ctrl.Start(ctxT(t), supervisor.Request{ID: "bg", Argv: []string{"sleep", "1000"}, Env: testEnv, Background: true, Log: filepath.Join(a.runsDir, "bg.log")}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fg, err := ctrl.Start(ctxT(t), supervisor.Request{ID: "fg", Argv: []string{"sleep", "1000"}, Env: testEnv}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := newCA(t, "another CA")
	foreign, _, _ := other.issue(t, daemonName, false)
	stranger, _, _ := a.ca.issue(t, "not the daemon", false)
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"no certificate", a.tlsConfig(nil)},
		{"another CA's certificate", a.tlsConfig(&foreign)},
		{"refused by Authorize", a.tlsConfig(&stranger)},
		{"no TLS", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := supervisor.Dial(ctxT(t), "tcp", a.addr, tc.cfg, supervisor.WithReadyTimeout(5*time.Second))
			if err == nil {
				c.Close()
				t.Fatal("the connection was taken")
			}
			if err := ctrl.Ping(ctxT(t)); err != nil {
				t.Fatalf("the client in control: %v", err)
			}
		})
	}
	select {
	case <-ctrl.Dead():
		t.Fatalf("the client in control died: %v", ctrl.Err())
	case <-fg.Done():
		t.Fatalf("its foreground run ended: %+v %v", fg.Exit(), fg.Err())
	default:
	}
	if !alive(bg.PID()) || !alive(fg.PID()) {
		t.Error("a run of the client in control was killed")
	}
	if !waitfor.Within(5*time.Second, func() bool { return strings.Count(a.logText(), "refused a connection") == 4 }) {
		t.Errorf("want 4 refusals logged:\n%s", a.logText())
	}
}

// TestListenFlood: connections that never handshake hold at most
// MaxPending places, each for at most the handshake timeout, and do not
// keep a real client out.
func TestListenFlood(t *testing.T) {
	const flood, maxPending = 40, 4
	handshake := 3 * time.Second
	a := startAgent(t, agentOpts{Handshake: handshake, MaxPending: maxPending})
	var idle []net.Conn
	for i := 0; i < flood; i++ {
		nc, err := net.Dial("tcp", a.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		idle = append(idle, nc)
	}
	time.Sleep(200 * time.Millisecond) // for the agent to accept them
	if n := sockets(t, a.pid); n > maxPending+2 {
		t.Errorf("the agent holds %d sockets for %d connections that never handshake, want at most %d", n, flood, maxPending+2)
	}
	begin := time.Now()
	c := a.dial(t)
	if d := time.Since(begin); d > handshake/2 {
		t.Errorf("the real client got in after %s", d)
	}
	if out, e := runOn(t, c, supervisor.Request{ID: id(), Argv: []string{"echo", "in"}, Env: testEnv}); out != "in\n" || e.Code != 0 {
		t.Errorf("got %q %+v", out, e)
	}
	// Every idle connection is closed by the handshake timeout.
	for i, nc := range idle {
		nc.SetReadDeadline(begin.Add(handshake + 2*time.Second))
		if _, err := nc.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("idle connection %d: read %v, want it closed by the agent", i, err)
		}
	}
	if err := c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(a.logText(), "not logged one by one") && strings.Count(a.logText(), "refused a connection") > 10 {
		t.Errorf("the flood is logged line by line:\n%s", a.logText())
	}
}

// sockets counts pid's open sockets.
func sockets(t *testing.T, pid int) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + e.Name()); strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// TestListenMalformedFrame: a connection that sends a broken frame is told
// why and closed; the agent and its runs go on.
func TestListenMalformedFrame(t *testing.T) {
	a := startAgent(t, agentOpts{})
	first := a.dial(t)
	bg, err := first.Start(ctxT(t), supervisor.Request{ID: "bg", Argv: []string{"sleep", "1000"}, Env: testEnv, Background: true, Log: filepath.Join(a.runsDir, "bg.log")}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()

	nc, err := tls.Dial("tcp", a.addr, a.tlsConfig(&a.daemon))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	if ev := readEvent(t, nc); ev.Ev != supervisor.EvReady || ev.Version != supervisor.Version {
		t.Fatalf("first event %+v, want ready", ev)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], supervisor.MaxFrame+1)
	if _, err := nc.Write(append(hdr[:], bytes.Repeat([]byte("x"), 4096)...)); err != nil {
		t.Fatal(err)
	}
	if ev := readEvent(t, nc); ev.Ev != supervisor.EvError || !strings.Contains(ev.Error, "at most") {
		t.Errorf("after a broken frame: %+v, want an error event saying why", ev)
	}
	if _, err := supervisor.ReadFrame(nc); !errors.Is(err, io.EOF) {
		t.Errorf("after the error event: %v, want the connection closed", err)
	}

	c := a.dial(t)
	runs, err := c.List(ctxT(t))
	if r, ok := findRun(runs, "bg"); err != nil || !ok || !r.Running || !alive(bg.PID()) {
		t.Errorf("list %+v, %v: want bg running", runs, err)
	}
}

func readEvent(t *testing.T, r io.Reader) supervisor.Event {
	t.Helper()
	b, err := supervisor.ReadFrame(r)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := supervisor.DecodeEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestListenIdle: with no connection in control for IdleTimeout the agent
// shuts down, killing its runs; a connection in control keeps it.
func TestListenIdle(t *testing.T) {
	idle := time.Second
	a := startAgent(t, agentOpts{Idle: idle})
	c := a.dial(t)
	bg, err := c.Start(ctxT(t), supervisor.Request{ID: "bg", Argv: []string{"sleep", "1000"}, Env: testEnv, Background: true, Log: filepath.Join(a.runsDir, "bg.log")}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * idle)
	if err := c.Ping(ctxT(t)); err != nil {
		t.Fatalf("the agent shut down with a connection in control: %v", err)
	}
	c.Close()
	closed := time.Now()
	select {
	case <-a.exited:
	case <-time.After(10 * idle):
		t.Fatal("the agent did not shut down")
	}
	if d := time.Since(closed); d < idle {
		t.Errorf("it shut down %s after the connection closed, before the idle timeout %s", d, idle)
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(a.logText(), "no connection in control for 1s") {
		t.Errorf("exit code %d, log:\n%s", code, a.logText())
	}
	waitGone(t, bg.PID(), "the background run after the shutdown")
}

// TestDialServer: what a client makes of a server that is not a
// supervisor of this version.
func TestDialServer(t *testing.T) {
	pki := newCA(t, "skillbox test CA")
	srvCert, _, _ := pki.issue(t, "agent", true)
	cliCert, _, _ := pki.issue(t, daemonName, false)
	roots := x509.NewCertPool()
	roots.AddCert(pki.cert)
	for _, tc := range []struct {
		name  string
		serve func(net.Conn)
		kind  error
		want  string
	}{
		{"another version", func(nc net.Conn) {
			supervisor.WriteFrame(nc, supervisor.Event{Ev: supervisor.EvReady, PID: 1, Version: supervisor.Version + 1})
			io.Copy(io.Discard, nc)
		}, supervisor.ErrVersion, fmt.Sprintf("speaks protocol version %d, this skillbox version %d", supervisor.Version+1, supervisor.Version)},
		{"no version", func(nc net.Conn) {
			supervisor.WriteFrame(nc, supervisor.Event{Ev: supervisor.EvReady, PID: 1})
			io.Copy(io.Discard, nc)
		}, supervisor.ErrVersion, "speaks protocol version 0"},
		{"silent", func(nc net.Conn) { io.Copy(io.Discard, nc) }, supervisor.ErrGone, "no ready event within 500ms"},
		{"huge frame", func(nc net.Conn) {
			nc.Write([]byte{0xff, 0xff, 0xff, 0xff})
			io.Copy(io.Discard, nc)
		}, supervisor.ErrProtocol, "at most"},
		{"closes", func(nc net.Conn) { nc.Close() }, supervisor.ErrGone, "closed the connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
				Certificates: []tls.Certificate{srvCert},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    roots,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				nc, err := ln.Accept()
				if err != nil {
					return
				}
				defer nc.Close()
				if err := nc.(*tls.Conn).Handshake(); err != nil {
					return
				}
				tc.serve(nc)
			}()
			begin := time.Now()
			c, err := supervisor.Dial(ctxT(t), "tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cliCert}}, supervisor.WithReadyTimeout(500*time.Millisecond))
			if err == nil {
				c.Close()
				t.Fatal("dial succeeded")
			}
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %v saying %q", err, tc.kind, tc.want)
			}
			if d := time.Since(begin); d > 3*time.Second {
				t.Errorf("the dial took %s", d)
			}
		})
	}
}

// TestListenShutdown: the connection in control ends the agent, a
// background run with it; the process exits 0.
func TestListenShutdown(t *testing.T) {
	a := startAgent(t, agentOpts{})
	c := a.dial(t)
	bg, err := c.Start(ctxT(t), supervisor.Request{ID: "bg", Argv: []string{"sleep", "1000"}, Env: testEnv, Background: true, Log: filepath.Join(a.runsDir, "bg.log")}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(ctxT(t)); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not end after its shutdown")
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(a.logText(), "shut down as the connection in control asked") {
		t.Errorf("exit code %d, log:\n%s", code, a.logText())
	}
	waitGone(t, bg.PID(), "the background run after the shutdown")
}
