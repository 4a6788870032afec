//go:build integration

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/doors/console"
)

// TestConsoleDaemon: `skillbox serve` serves the console API on the
// socket beside its own, with the same mode; `skillbox console` bridges a
// browser to it as the uid that started it (a one-time token, then a
// cookie); the daemon's stop removes the socket, and the bridge then
// answers 503 instead of hanging.
func TestConsoleDaemon(t *testing.T) {
	needDaemon(t)
	d := newItDaemon(t)
	d.start()
	defer d.stop()
	sock := console.ConsoleSocket(d.socket)
	fi, err := os.Stat(sock)
	mainFi, mainErr := os.Stat(d.socket)
	if err != nil || mainErr != nil || fi.Mode() != mainFi.Mode() {
		t.Fatalf("console socket %v %v, main socket %v %v: want both, of one mode", fi, err, mainFi, mainErr)
	}

	url := startConsole(t, exec.Command(itBin, "console", "--socket", d.socket))
	base, _, _ := strings.Cut(url, "?")

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	get := func(c *http.Client, u string) (int, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		if _, err := io.Copy(&b, resp.Body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b.String()
	}
	if code, body := get(browser, url); code != http.StatusOK {
		t.Fatalf("the printed URL: %d %s", code, body)
	}
	code, body := get(browser, base+"api/v1/whoami")
	var who console.Whoami
	if code != http.StatusOK || json.Unmarshal([]byte(body), &who) != nil || who.UID != uint32(os.Getuid()) {
		t.Fatalf("whoami through the bridge: %d %s, want the uid that started the console (%d)", code, body, os.Getuid())
	}
	// The token worked once; another client without the cookie gets nothing.
	if code, body := get(&http.Client{Timeout: 30 * time.Second}, url); code != http.StatusForbidden {
		t.Errorf("the used token again: %d %s, want 403", code, body)
	}
	if code, body := get(&http.Client{Timeout: 30 * time.Second}, base+"api/v1/whoami"); code != http.StatusUnauthorized {
		t.Errorf("no cookie: %d %s, want 401", code, body)
	}

	d.stop()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the console socket is left after the daemon stopped: %v", err)
	}
	if code, body := get(browser, base+"api/v1/whoami"); code != http.StatusServiceUnavailable {
		t.Errorf("with the daemon stopped: %d %s, want 503", code, body)
	}
}
