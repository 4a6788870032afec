// Package storetest starts a real etcd for the tests of the shared state
// store (sandbox/core/store's EtcdKV, and replicas of the daemon over it): a
// mock would not show what a compare-and-swap across processes does.
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EtcdBinary returns the etcd server binary tests use: $SKILLBOX_ETCD, else
// the one hack/kube.sh unpacked from Debian's etcd-server into its cache
// ($KUBE_CACHE or /var/cache/skillbox/kube/*), else etcd on PATH. With none,
// and fetch set, it runs `hack/kube.sh etcd-bin` (apt-get download, as root)
// to fetch it the way the test cluster does. "" when there is none.
func EtcdBinary(fetch bool) (string, error) {
	if p := os.Getenv("SKILLBOX_ETCD"); p != "" {
		return p, nil
	}
	var cands []string
	if c := os.Getenv("KUBE_CACHE"); c != "" {
		cands = append(cands, filepath.Join(c, "debian/usr/bin/etcd"))
	}
	globbed, _ := filepath.Glob("/var/cache/skillbox/kube/*/debian/usr/bin/etcd")
	cands = append(cands, globbed...)
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && st.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if !fetch {
		return "", nil
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "hack", "kube.sh")
	var stderr bytes.Buffer
	cmd := exec.Command(script, "etcd-bin")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("fetching etcd with %s etcd-bin: %w\n%s", script, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// StartEtcd starts etcd (binary bin) on loopback with a temporary data
// directory, waits until it is healthy and returns its client URL; the
// test's cleanup kills it (by its PID) and removes the data.
func StartEtcd(t testing.TB, bin string) string {
	t.Helper()
	url, stop, err := Start(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// Start starts etcd (binary bin) on loopback with its data and log in dir,
// waits until it is healthy and returns its client URL and the func that
// kills it (by its PID) and waits for it. For TestMain, where there is no
// testing.TB.
func Start(bin, dir string) (string, func(), error) {
	port := func() (int, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	cp, err := port()
	if err != nil {
		return "", nil, err
	}
	pp, err := port()
	if err != nil {
		return "", nil, err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", cp)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	logPath := filepath.Join(dir, "etcd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--name", "test", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test="+peer, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	// A test binary that panics skips its cleanups: etcd goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, fmt.Errorf("starting etcd %s: %w", bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	stop := func() {
		cmd.Process.Kill()
		<-done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, client+"/health", nil)
		if r, err := http.DefaultClient.Do(req); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return client, stop, nil
			}
		}
		select {
		case <-done:
			log, _ := os.ReadFile(logPath)
			return "", nil, fmt.Errorf("etcd exited before it was healthy:\n%s", log)
		case <-ctx.Done():
			stop()
			log, _ := os.ReadFile(logPath)
			return "", nil, fmt.Errorf("etcd not healthy at %s within 30s:\n%s", client, log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
