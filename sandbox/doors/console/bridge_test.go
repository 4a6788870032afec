package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/doors/console"
)

// upstream stands for the daemon's console socket: it answers every
// request with what it received.
func upstream(t *testing.T) string {
	t.Helper()
	return upstreamWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"method": r.Method, "path": r.URL.RequestURI(), "cookie": r.Header.Get("Cookie"), "host": r.Host})
	}))
}

// upstreamWith serves h on a Unix socket and returns its path.
func upstreamWith(t *testing.T, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "c.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func startBridge(t *testing.T, sock string) *console.Bridge {
	t.Helper()
	b, err := console.ListenBridge("127.0.0.1:0", sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Serve() }()
	t.Cleanup(func() {
		b.Shutdown(context.Background())
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("bridge: %v", err)
		}
	})
	return b
}

// send makes one request to the bridge without following redirects.
func send(t *testing.T, b *console.Bridge, method, path string, hdr map[string]string) (*http.Response, map[string]string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+b.Addr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var echo map[string]string
	json.NewDecoder(resp.Body).Decode(&echo)
	return resp, echo
}

func TestBridge(t *testing.T) {
	b := startBridge(t, upstream(t))
	token := b.URL()[strings.Index(b.URL(), "?token=")+len("?token="):]
	origin := "http://" + b.Addr().String()

	if resp, _ := send(t, b, "GET", console.Prefix+"/whoami", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a cookie: %d, want 401", resp.StatusCode)
	}
	if resp, _ := send(t, b, "GET", "/?token=wrong", nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a wrong token: %d, want 403", resp.StatusCode)
	}
	if resp, _ := send(t, b, "GET", "/?token="+token, map[string]string{"Host": "evil.example:80"}); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("the token under a foreign Host: %d, want 421", resp.StatusCode)
	}
	resp, _ := send(t, b, "GET", "/?token="+token, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("the token: %d to %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == b.CookieName() {
			cookie = c
		}
	}
	if b.CookieName() != console.CookiePrefix+port(b) {
		t.Errorf("cookie name %q, want one per port", b.CookieName())
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Value == "" || cookie.Value == token {
		t.Fatalf("cookie = %+v, want HttpOnly SameSite=Strict, not the token", cookie)
	}
	if resp, _ := send(t, b, "GET", "/?token="+token, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the token a second time: %d, want 403", resp.StatusCode)
	}
	withCookie := func(extra map[string]string) map[string]string {
		h := map[string]string{"Cookie": b.CookieName() + "=" + cookie.Value}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}

	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
		status             int
		forwarded          bool
	}{
		{"get with the cookie", "GET", console.Prefix + "/whoami", withCookie(nil), 200, true},
		{"localhost names the bridge too", "GET", console.Prefix + "/whoami", withCookie(map[string]string{"Host": "localhost:" + port(b)}), 200, true},
		{"a wrong cookie", "GET", console.Prefix + "/whoami", map[string]string{"Cookie": b.CookieName() + "=nope"}, 401, false},
		{"a rebound name", "GET", console.Prefix + "/whoami", withCookie(map[string]string{"Host": "attacker.example:" + port(b)}), 421, false},
		{"post without Origin", "POST", console.Prefix + "/confirmations/c/approve", withCookie(nil), 403, false},
		{"post from another site", "POST", console.Prefix + "/confirmations/c/approve", withCookie(map[string]string{"Origin": "http://attacker.example"}), 403, false},
		{"post from another port", "POST", console.Prefix + "/confirmations/c/approve", withCookie(map[string]string{"Origin": "http://127.0.0.1:1"}), 403, false},
		{"post from the console", "POST", console.Prefix + "/confirmations/c/approve", withCookie(map[string]string{"Origin": origin}), 200, true},
		{"a page path gets the app", "GET", "/confirmations/c", withCookie(nil), 200, false},
		{"a post outside the API", "POST", "/confirmations", withCookie(map[string]string{"Origin": origin}), 404, false},
		{"a page without the cookie", "GET", "/app.js", nil, 401, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, echo := send(t, b, tc.method, tc.path, tc.hdr)
			if resp.StatusCode != tc.status {
				t.Fatalf("%d, want %d", resp.StatusCode, tc.status)
			}
			if got := echo["path"] != ""; got != tc.forwarded {
				t.Fatalf("forwarded = %v, want %v (%v)", got, tc.forwarded, echo)
			}
			if tc.forwarded && (echo["path"] != tc.path || echo["method"] != tc.method || echo["cookie"] != "") {
				t.Errorf("the daemon got %v", echo)
			}
		})
	}
}

func port(b *console.Bridge) string {
	_, p, _ := net.SplitHostPort(b.Addr().String())
	return p
}

func TestBridgeLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:0", true},
		{"[::1]:0", true},
		{"localhost:0", true},
		{"0.0.0.0:0", false},
		{":0", false},
		{"[::]:0", false},
		{"192.0.2.1:0", false},
		{"example.com:0", false},
		{"127.0.0.1", false},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			b, err := console.ListenBridge(tc.addr, "/nonexistent.sock", nil)
			if b != nil {
				b.Shutdown(context.Background())
			}
			if tc.ok && err != nil && !strings.Contains(err.Error(), "cannot assign") {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && err == nil {
				t.Fatal("a non-loopback address was accepted")
			}
		})
	}
}

func TestBridgeDaemonDown(t *testing.T) {
	b := startBridge(t, filepath.Join(t.TempDir(), "none.sock"))
	token := b.URL()[strings.Index(b.URL(), "?token=")+len("?token="):]
	resp, _ := send(t, b, "GET", "/?token="+token, nil)
	var cookie string
	for _, c := range resp.Cookies() {
		cookie = c.Value
	}
	if resp, _ := send(t, b, "GET", console.Prefix+"/whoami", map[string]string{"Cookie": b.CookieName() + "=" + cookie}); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("daemon down: %d, want 503", resp.StatusCode)
	}
}

// TestBridgePages: the embedded build is served under its policy; a path
// that is not a file gets index.html (the pages route by fragment).
func TestBridgePages(t *testing.T) {
	b := startBridge(t, upstream(t))
	token := b.URL()[strings.Index(b.URL(), "?token=")+len("?token="):]
	resp, _ := send(t, b, "GET", "/?token="+token, nil)
	cookie := map[string]string{}
	for _, c := range resp.Cookies() {
		cookie["Cookie"] = b.CookieName() + "=" + c.Value
	}
	get := func(path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+b.Addr().String()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	for _, tc := range []struct {
		path, ctype, cache, contains string
	}{
		{"/", "text/html; charset=utf-8", "no-store", `<script type="module" src="/app.js"></script>`},
		{"/index.html", "text/html; charset=utf-8", "no-store", "skillbox console"},
		{"/audit/deep/link", "text/html; charset=utf-8", "no-store", "skillbox console"},
		{"/app.js", "text/javascript; charset=utf-8", "no-cache", "/api/v1"},
		{"/app.css", "text/css; charset=utf-8", "no-cache", "font"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, body := get(tc.path, cookie)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tc.ctype || resp.Header.Get("Cache-Control") != tc.cache ||
				resp.Header.Get("Content-Security-Policy") != console.ContentSecurityPolicy || !strings.Contains(body, tc.contains) {
				t.Fatalf("%d %v\n%.200s", resp.StatusCode, resp.Header, body)
			}
			if strings.Contains(body, "<script>") {
				t.Errorf("an inline script: the policy forbids it")
			}
			if etag := resp.Header.Get("ETag"); etag != "" {
				hdr := map[string]string{"If-None-Match": etag}
				for k, v := range cookie {
					hdr[k] = v
				}
				if again, _ := get(tc.path, hdr); again.StatusCode != http.StatusNotModified {
					t.Errorf("If-None-Match %s: %d, want 304", etag, again.StatusCode)
				}
			}
		})
	}
}

// TestBridgeStreams: the bridge passes a stream on as the daemon writes it
// (a run's output), and closes the daemon's side when the browser goes.
func TestBridgeStreams(t *testing.T) {
	gone := make(chan struct{})
	b := startBridge(t, upstreamWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: run.output\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	})))
	token := b.URL()[strings.Index(b.URL(), "?token=")+len("?token="):]
	resp, _ := send(t, b, "GET", "/?token="+token, nil)
	var cookie string
	for _, c := range resp.Cookies() {
		if c.Name == b.CookieName() {
			cookie = c.Name + "=" + c.Value
		}
	}
	req, err := http.NewRequest("GET", "http://"+b.Addr().String()+console.Prefix+"/runs/run_x/output", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Cookie", cookie)
	out, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out.Body).ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		if line != "event: run.output\n" {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the bridge held the stream back")
	}
	out.Body.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the daemon's side stayed open after the browser went")
	}
}
