package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/doors/connlimit"
	"github.com/skillbox/skillbox/sandbox/doors/console/web"
	"github.com/skillbox/skillbox/sandbox/doors/jsonrpc"
)

// CookiePrefix starts the bridge's session cookie's name, which ends in
// the bridge's port: cookies are per host, not per port, so two consoles
// on 127.0.0.1 (two uids) would otherwise replace each other's cookie in
// one browser.
const CookiePrefix = "skillbox_console_"

// ErrNotLoopback refuses a bridge address off the loopback interface: the
// bridge lends its uid to whoever reaches it.
var ErrNotLoopback = errkind.Errorf(api.ErrInvalidParams, "the console listens on loopback only")

// Bridge is `skillbox console`: a loopback HTTP server that forwards the
// console API to the daemon's console socket as the uid that started it.
// A browser gets in once with the printed URL's one-time token, which is
// traded for an HttpOnly SameSite=Strict cookie; every later request needs
// that cookie, a Host naming the bridge's own address (DNS rebinding), and
// on a state-changing method an Origin of that address (cross-site
// requests).
type Bridge struct {
	ln     net.Listener
	socket string
	log    hclog.Logger
	proxy  *httputil.ReverseProxy
	srv    *http.Server
	pages  *pages

	mu        sync.Mutex
	token     string // "" once used
	session   string // the cookie's value, set when the token is used
	authority string // host:port the browser must name
	cookie    string // the session cookie's name
}

// ListenBridge opens the bridge on addr (host:port, the host a loopback IP
// or "localhost") for the console socket at socket.
func ListenBridge(addr, socket string, log hclog.Logger) (*Bridge, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, errkind.Errorf(api.ErrInvalidParams, "--listen %q: %v (give host:port, e.g. 127.0.0.1:0)", addr, err)
	}
	if err := CheckLoopback(host); err != nil {
		return nil, err
	}
	if host == "localhost" {
		addr = net.JoinHostPort("127.0.0.1", addr[strings.LastIndex(addr, ":")+1:])
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("console bridge on %s: %w", addr, err)
	}
	b, err := newBridge(ln, socket, log)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return b, nil
}

// CheckLoopback refuses a host that is not a loopback IP or "localhost".
func CheckLoopback(host string) error {
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return errkind.Errorf(ErrNotLoopback, "%q is not a loopback address (127.0.0.1, ::1 or localhost): the bridge acts as your uid, so it must not be reachable from the network", host)
	}
	return nil
}

// BridgeMaxConnections bounds the browser connections a bridge holds.
const BridgeMaxConnections = 64

func newBridge(ln net.Listener, socket string, log hclog.Logger) (*Bridge, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	tok, err := randomHex()
	if err != nil {
		return nil, err
	}
	pg, err := newPages(web.Dist)
	if err != nil {
		return nil, err
	}
	// A loopback port carries no uid: every browser connection shares one
	// cap, and one more is answered 503 and closed at once.
	capped := connlimit.NewListener(ln, connlimit.New(connlimit.Limits{Total: BridgeMaxConnections}), func(net.Conn) (uint32, bool) { return 0, false })
	capped.Refuse = connlimit.HTTPRefusal
	capped.Refused = func(_ net.Conn, err *connlimit.RefusedError) {
		log.Warn("console: connection refused", "reason", err.Error())
	}
	b := &Bridge{ln: capped, socket: socket, log: log, token: tok, authority: ln.Addr().String(), pages: pg}
	_, port, _ := net.SplitHostPort(b.authority)
	b.cookie = CookiePrefix + port
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	b.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "console"})
			pr.Out.Host = "console"
			// The daemon needs neither the browser's cookie nor its origin.
			pr.Out.Header.Del("Cookie")
			pr.Out.Header.Del("Origin")
		},
		// Flush every write: a run's output (Server-Sent Events) must
		// reach the browser as the daemon sends it. When the browser goes
		// away, the request's context ends and the proxy closes the
		// daemon's connection, which ends the daemon's follower.
		FlushInterval: -1,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, "unix", socket)
			},
			MaxIdleConns:    4,
			IdleConnTimeout: time.Minute,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			b.log.Warn("console: the daemon did not answer", "path", r.URL.Path, "error", err)
			writeError(w, errkind.Errorf(api.ErrUnavailable, "the daemon's console socket %s did not answer: %v (is `skillbox serve` running?)", socket, err))
		},
	}
	b.srv = &http.Server{Handler: b, ReadHeaderTimeout: connlimit.HeaderTimeout, IdleTimeout: connlimit.IdleTimeout, MaxHeaderBytes: connlimit.MaxHeaderBytes}
	return b, nil
}

func randomHex() (string, error) {
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("console token: %w", err)
	}
	return hex.EncodeToString(buf), nil
}

// URL is what to open once: the bridge's address with the one-time token.
func (b *Bridge) URL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return "http://" + b.authority + "/?token=" + b.token
}

// CookieName is the name of the bridge's session cookie.
func (b *Bridge) CookieName() string { return b.cookie }

// Addr is the bridge's address.
func (b *Bridge) Addr() net.Addr { return b.ln.Addr() }

// Serve serves until Shutdown; it returns http.ErrServerClosed then.
func (b *Bridge) Serve() error { return b.srv.Serve(b.ln) }

// Shutdown stops the bridge, letting requests in flight finish until ctx
// ends.
func (b *Bridge) Shutdown(ctx context.Context) error { return b.srv.Shutdown(ctx) }

// ServeHTTP checks the request (Host, token or cookie, Origin) and then
// forwards /api/ requests to the daemon and serves the pages otherwise.
func (b *Bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !b.hostAllowed(r.Host) {
		refuse(w, http.StatusMisdirectedRequest, "Host %q is not this console's address %s (a rebound DNS name?)", r.Host, b.authority)
		return
	}
	if tok := r.URL.Query().Get("token"); tok != "" {
		b.redeem(w, r, tok)
		return
	}
	if !b.hasSession(r) {
		refuse(w, http.StatusUnauthorized, "no console session: open the URL `skillbox console` printed (its token works once)")
		return
	}
	if !safeMethod(r.Method) && !b.originAllowed(r.Header.Get("Origin")) {
		refuse(w, http.StatusForbidden, "Origin %q is not this console (%s): cross-site requests are refused", r.Header.Get("Origin"), "http://"+b.authority)
		return
	}
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if strings.HasPrefix(r.URL.Path, "/api/") {
		b.proxy.ServeHTTP(w, r)
		return
	}
	if safeMethod(r.Method) {
		b.pages.ServeHTTP(w, r)
		return
	}
	refuse(w, http.StatusNotFound, "%s is not part of the console", r.URL.Path)
}

// redeem trades the one-time token for the session cookie and redirects
// to the same path without the token.
func (b *Bridge) redeem(w http.ResponseWriter, r *http.Request, tok string) {
	b.mu.Lock()
	ok := b.token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(b.token)) == 1
	var session string
	if ok {
		var err error
		if session, err = randomHex(); err != nil {
			b.mu.Unlock()
			refuse(w, http.StatusInternalServerError, "%v", err)
			return
		}
		b.token, b.session = "", session
	}
	b.mu.Unlock()
	if !ok {
		refuse(w, http.StatusForbidden, "the token is wrong or was already used: start `skillbox console` again for a new URL")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: b.cookie, Value: session, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	u := *r.URL
	q := u.Query()
	q.Del("token")
	u.RawQuery = q.Encode()
	u.Scheme, u.Host = "", ""
	http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
}

func (b *Bridge) hasSession(r *http.Request) bool {
	c, err := r.Cookie(b.cookie)
	if err != nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.session != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(b.session)) == 1
}

// hostAllowed accepts the bridge's own address, or localhost with its
// port.
func (b *Bridge) hostAllowed(host string) bool {
	if host == b.authority {
		return true
	}
	_, port, _ := net.SplitHostPort(b.authority)
	return host == net.JoinHostPort("localhost", port)
}

func (b *Bridge) originAllowed(origin string) bool {
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err == nil && u.Scheme == "http" && u.Path == "" && b.hostAllowed(u.Host)
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

func refuse(w http.ResponseWriter, status int, format string, args ...any) {
	kind := api.KindDenied
	switch status {
	case http.StatusNotFound:
		kind = api.KindNotFound
	case http.StatusInternalServerError:
		kind = api.KindInternal
	}
	writeJSON(w, status, ErrorBody{Error: &api.Error{Code: jsonrpc.CodeForKind(kind), Kind: kind, Message: fmt.Sprintf(format, args...)}})
}

// ServeUntil serves until ctx ends, then shuts the bridge down (requests
// in flight get 5 s).
func (b *Bridge) ServeUntil(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- b.Serve() }()
	select {
	case err := <-done:
		return fmt.Errorf("console bridge on %s: %w", b.authority, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.Shutdown(sctx)
	if err := <-done; err != nil && err != http.ErrServerClosed {
		return fmt.Errorf("console bridge on %s: %w", b.authority, err)
	}
	return nil
}
