package egress

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"

	"golang.org/x/net/netutil"
	"golang.org/x/sys/unix"

	"github.com/skillbox/skillbox/runtime/errkind"
)

// ErrSetup is wrapped when the namespaces or the proxy cannot be made.
var ErrSetup = errors.New("egress setup failed")

// The plumbing of one run: two network namespaces joined by a veth pair.
// The sandbox's namespace has loopback and one end (eth0) with the .2 of
// a /30 chosen at random per run in the shared address space
// 100.64.0.0/10, and no route beyond that /30; the proxy's namespace has
// the other end with the .1, where the proxy (ProxyPort) and the name
// server (53) listen. The proxy's sockets are made in its namespace and
// then served from skillbox's own goroutines, which dial out from the
// host's namespace. Nothing of the host's namespace is reachable from the
// sandbox (the host's services do not listen in the proxy's namespace),
// and a connection anywhere but the proxy fails at once: no route. The
// same namespace works for runc (the container joins it) and for gVisor
// (runsc --network=sandbox: its netstack takes over eth0).

// transparentListener is one port of the transparent path.
type transparentListener struct {
	l    net.Listener
	port uint16
}

// maxDNSConns caps the connections a sandbox may hold open at once to the
// name server over TCP; more wait to be accepted. (The proxy's ports are
// capped by Config.MaxConcurrent.)
const maxDNSConns = 16

// ProxyPort is the proxy's port on its address.
const ProxyPort = 3128

// NamespacePrefix starts the names (in /run/netns) of the namespaces
// egress makes, so a sweep after a crash can find them.
const NamespacePrefix = "skillbox-eg-"

// Egress is a running egress of one sandbox.
type Egress struct {
	id                 string
	sandboxNS, proxyNS string
	proxyAddr          netip.Addr
	sandboxAddr        netip.Addr
	proxy              *Proxy
	dns                *dnsServer
	listener           net.Listener
	resolvConf         string
	caBundle           string
	transparent        []transparentListener
	transparentWG      sync.WaitGroup
	secrets            []Secret
	serveDone          chan struct{}
	serving            bool // Start got as far as serving
	closeOnce          sync.Once
	closeErr           error
	stats              Stats
	shutOnce           sync.Once
}

// Start makes the namespaces of run id, starts the proxy and name server
// in them and writes the sandbox's resolv.conf into dir. Needs root and
// iproute2's ip. On error nothing is left behind.
func Start(ctx context.Context, id, dir string, cfg Config) (_ *Egress, err error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errkind.Errorf(ErrSetup, "ip (iproute2) is not installed: apt-get install iproute2")
	}
	var rnd [2]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, errkind.Wrap(ErrSetup, err)
	}
	// One of the 2^14 100.x.y.0/30 in 100.64.0.0/10, at random.
	base := [4]byte{100, 64 + rnd[0]&0x3f, rnd[1], 0}
	e := &Egress{
		id:          id,
		sandboxNS:   NamespacePrefix + "s-" + id,
		proxyNS:     NamespacePrefix + "p-" + id,
		proxyAddr:   netip.AddrFrom4([4]byte{base[0], base[1], base[2], 1}),
		sandboxAddr: netip.AddrFrom4([4]byte{base[0], base[1], base[2], 2}),
		serveDone:   make(chan struct{}),
	}
	defer func() {
		if err != nil {
			_ = e.Close()
		}
	}()
	if err := ipCmd(ctx, "", "netns add "+e.sandboxNS); err != nil {
		return e, err
	}
	if err := ipCmd(ctx, "", "netns add "+e.proxyNS); err != nil {
		return e, err
	}
	if err := ipCmd(ctx, "", fmt.Sprintf("link add eg0 netns %s type veth peer name eth0 netns %s", e.proxyNS, e.sandboxNS)); err != nil {
		return e, err
	}
	if err := ipCmd(ctx, e.sandboxNS, fmt.Sprintf("addr add %s/30 dev eth0\nlink set eth0 up\nlink set lo up", e.sandboxAddr)); err != nil {
		return e, err
	}
	if err := ipCmd(ctx, e.proxyNS, fmt.Sprintf("addr add %s/30 dev eg0\nlink set eg0 up", e.proxyAddr)); err != nil {
		return e, err
	}

	e.dns = &dnsServer{rules: cfg.Rules, answer: e.proxyAddr}
	e.proxy = NewProxy(cfg)
	e.dns.onDeny = func(name string) {
		e.proxy.noteDenied()
		e.proxy.reports.send(Attempt{Kind: "dns", Host: name, Rule: "none", Reason: "no egress rule names " + name})
	}
	err = inNetns(filepath.Join("/run/netns", e.proxyNS), func() error {
		var err error
		if e.listener, err = net.Listen("tcp4", netip.AddrPortFrom(e.proxyAddr, ProxyPort).String()); err != nil {
			return err
		}
		// The proxy's ports share the run's cap on connections open at
		// once (Proxy.listen).
		dnsAddr := netip.AddrPortFrom(e.proxyAddr, 53).String()
		if e.dns.udp, err = net.ListenPacket("udp4", dnsAddr); err != nil {
			return err
		}
		if e.dns.tcp, err = net.Listen("tcp4", dnsAddr); err != nil {
			return err
		}
		e.dns.tcp = netutil.LimitListener(e.dns.tcp, maxDNSConns)
		for _, port := range transparentPorts(cfg.Rules) {
			l, err := net.Listen("tcp4", netip.AddrPortFrom(e.proxyAddr, port).String())
			if err != nil {
				return err
			}
			e.transparent = append(e.transparent, transparentListener{l, port})
		}
		return nil
	})
	if err != nil {
		return e, errkind.Errorf(ErrSetup, "listen in the proxy's namespace: %w", err)
	}
	if len(cfg.Secrets) > 0 {
		if cfg.CA == nil {
			return e, errkind.Errorf(ErrSetup, "the run has secrets but no CA to add them with")
		}
		var bundle []byte
		if cfg.SystemBundle != "" {
			if b, err := os.ReadFile(cfg.SystemBundle); err == nil {
				bundle = append(b, '\n')
			}
		}
		e.caBundle = filepath.Join(dir, "ca-bundle.pem")
		if err := os.WriteFile(e.caBundle, append(bundle, cfg.CA.CertPEM()...), 0o644); err != nil {
			return e, errkind.Errorf(ErrSetup, "write the CA bundle: %w", err)
		}
		e.secrets = cfg.Secrets
	}
	e.resolvConf = filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(e.resolvConf, []byte("nameserver "+e.proxyAddr.String()+"\noptions attempts:1 timeout:2\n"), 0o644); err != nil {
		return e, errkind.Errorf(ErrSetup, "write resolv.conf: %w", err)
	}
	e.serving = true
	e.dns.serve()
	go func() {
		defer close(e.serveDone)
		_ = e.proxy.Serve(e.listener)
	}()
	for _, t := range e.transparent {
		e.transparentWG.Add(1)
		go func() {
			defer e.transparentWG.Done()
			e.proxy.serveTransparent(t.l, t.port)
		}()
	}
	return e, nil
}

// NetNS is the path of the sandbox's network namespace.
func (e *Egress) NetNS() string { return filepath.Join("/run/netns", e.sandboxNS) }

// ResolvConf is the host path of the file to mount at /etc/resolv.conf.
func (e *Egress) ResolvConf() string { return e.resolvConf }

// ProxyURL is the proxy's URL as the sandbox reaches it.
func (e *Egress) ProxyURL() string {
	return fmt.Sprintf("http://%s:%d", e.proxyAddr, ProxyPort)
}

// Env is what the sandbox's environment gets so that clients use the
// proxy: both spellings of the proxy variables, and loopback exempt.
func (e *Egress) Env() []string {
	env := ProxyEnv(e.ProxyURL())
	for _, s := range e.secrets {
		env = append(env, s.Name+"="+Placeholder(s.Name))
	}
	if e.caBundle != "" {
		for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT"} {
			env = append(env, k+"="+CABundlePath)
		}
	}
	return env
}

// ProxyEnv is what a sandbox's environment gets so that its clients use
// the proxy at url: both spellings of the proxy variables, and loopback
// exempt. A backend whose proxy is not an Egress (the kubernetes one)
// gives its sandboxes the same.
func ProxyEnv(url string) []string {
	noProxy := "localhost,127.0.0.1,::1"
	return []string{
		"HTTP_PROXY=" + url, "HTTPS_PROXY=" + url, "http_proxy=" + url, "https_proxy=" + url,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
		// npm reads its own names too.
		"npm_config_proxy=" + url, "npm_config_https_proxy=" + url,
	}
}

// CABundle is the host path of the file to mount at CABundlePath ("" when
// the run has no secrets).
func (e *Egress) CABundle() string { return e.caBundle }

// Over is closed when the run hits a cap.
func (e *Egress) Over() <-chan struct{} { return e.proxy.Over() }

// Shutdown stops the proxy and the name server, waits for every attempt
// to be reported and returns the run's totals. Safe to call twice.
func (e *Egress) Shutdown() Stats {
	e.shutOnce.Do(func() {
		if !e.serving {
			// Start failed before serving: close what it opened.
			for _, c := range []io.Closer{e.listener, e.dnsUDP(), e.dnsTCP()} {
				if c != nil {
					c.Close()
				}
			}
			for _, t := range e.transparent {
				t.l.Close()
			}
			return
		}
		for _, t := range e.transparent {
			t.l.Close()
		}
		// The name server first: its refusals go into the proxy's
		// reports, which Shutdown flushes.
		e.dns.close()
		e.transparentWG.Wait()
		e.proxy.Shutdown()
		<-e.serveDone
		e.stats = e.proxy.Stats()
	})
	return e.stats
}

func (e *Egress) dnsUDP() io.Closer {
	if e.dns == nil || e.dns.udp == nil {
		return nil
	}
	return e.dns.udp
}

func (e *Egress) dnsTCP() io.Closer {
	if e.dns == nil || e.dns.tcp == nil {
		return nil
	}
	return e.dns.tcp
}

// Close shuts down and removes the namespaces (the veth pair goes with
// them). Safe to call twice.
func (e *Egress) Close() error {
	e.closeOnce.Do(func() {
		e.Shutdown()
		e.closeErr = RemoveNamespaces(context.Background(), e.id)
	})
	return e.closeErr
}

// RemoveNamespaces removes the namespaces of run id, if any are left (a
// run of a crashed process: the runtime's sweep calls it for each dead run
// dir it removes).
func RemoveNamespaces(ctx context.Context, id string) error {
	var errs []error
	for _, ns := range []string{NamespacePrefix + "s-" + id, NamespacePrefix + "p-" + id} {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
			continue
		}
		if err := ipCmd(ctx, "", "netns delete "+ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ipCmd runs ip commands (one per line) in batch mode, in namespace ns
// when it is set.
func ipCmd(ctx context.Context, ns, cmds string) error {
	args := []string{}
	if ns != "" {
		args = append(args, "-n", ns)
	}
	args = append(args, "-batch", "-")
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(cmds + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return errkind.Errorf(ErrSetup, "ip %s: %v: %s", strings.ReplaceAll(cmds, "\n", "; "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// inNetns runs fn on a thread that has joined the network namespace at
// path. The thread is never returned to the scheduler: it ends with its
// goroutine, so no other goroutine ever runs in that namespace.
func inNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("join %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
