package siem

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/audit/audittest"
)

// TestExportRealLog exports a real signed log holding every event a
// caller can append (and the genesis and checkpoint the log writes
// itself) in each format, and checks every line against the schema
// tables.
func TestExportRealLog(t *testing.T) {
	var recs []*audit.Record
	for _, r := range everyEvent() {
		if !strings.HasPrefix(r.Event, "audit.") {
			c := *r
			c.Seq, c.Time, c.Replica, c.Hash = 0, time.Time{}, "", ""
			recs = append(recs, &c)
		}
	}
	dir, _, _ := audittest.SignedLog(t, recs)
	var ot ocsfTable
	var et ecsTable
	loadJSON(t, "ocsf-1.3.0-required.json", &ot)
	loadJSON(t, "ecs-8.11.0-base.json", &et)
	want := len(recs) + 2 // genesis, and the checkpoint Close writes
	for _, f := range Formats {
		t.Run(string(f), func(t *testing.T) {
			m, err := NewMapper(f, "dev")
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			n, err := Export(dir, audit.Filter{}, m, NewStreamSink(&buf))
			if err != nil || n != want {
				t.Fatalf("Export: %d records, %v; want %d", n, err, want)
			}
			lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
			if len(lines) != want {
				t.Fatalf("%d lines, want %d", len(lines), want)
			}
			events := map[string]bool{}
			for _, ln := range lines {
				o := decodeBody(t, []byte(ln))
				var bad []string
				switch f {
				case FormatOCSF:
					bad = checkOCSF(&ot, o)
					events[o["unmapped"].(map[string]any)["event"].(string)] = true
				case FormatECS:
					bad = checkECS(&et, o)
					events[o["event"].(map[string]any)["action"].(string)] = true
				default:
					events[o["event"].(string)] = true
					if _, ok := o["peer.uid"]; !ok && o["event"] == audit.EventSessionCreate {
						t.Errorf("json is not flat: %s", ln)
					}
				}
				for _, b := range bad {
					t.Errorf("%s: %s\n%s", f, b, ln)
				}
			}
			for _, r := range recs {
				if !events[r.Event] {
					t.Errorf("%s missing from the export", r.Event)
				}
			}
		})
	}
	// The filters apply.
	m, _ := NewMapper(FormatECS, "dev")
	var buf bytes.Buffer
	if n, err := Export(dir, audit.Filter{Event: "run"}, m, NewStreamSink(&buf)); err != nil || n != 3 {
		t.Fatalf("--event run: %d, %v", n, err)
	}
}

// TestJSONUnchanged: the json format is audit.Export's output, line for
// line.
func TestJSONUnchanged(t *testing.T) {
	dir, _, _ := audittest.SignedLog(t, everyEvent()[1:5])
	var old, now bytes.Buffer
	if _, err := audit.Export(&old, dir, audit.Filter{}); err != nil {
		t.Fatal(err)
	}
	m, _ := NewMapper("", "dev")
	if _, err := Export(dir, audit.Filter{}, m, NewStreamSink(&now)); err != nil {
		t.Fatal(err)
	}
	if old.String() != now.String() {
		t.Fatalf("json differs from audit.Export:\n%s\n%s", old.String(), now.String())
	}
}

// appendAll appends records to an open log.
func appendAll(t *testing.T, l *audit.Log, recs ...*audit.Record) {
	t.Helper()
	for _, r := range recs {
		if err := l.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

// waitLines waits until path holds n lines and returns them.
func waitLines(t *testing.T, path string, n int) []string {
	t.Helper()
	var lines []string
	waitfor.NoError(t, fmt.Sprintf("%d lines in %s", n, path), 10*time.Second, func() error {
		b, _ := os.ReadFile(path)
		lines = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(b) > 0 && len(lines) >= n {
			return nil
		}
		return fmt.Errorf("have:\n%s", b)
	})
	return lines
}

// TestFollowToFile follows a log across its own rotation into a file
// that a log rotator moves away meanwhile.
func TestFollowToFile(t *testing.T) {
	dir := t.TempDir()
	l, err := audit.Open(dir, audit.Options{CheckpointEvery: -1, RotateBytes: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	appendAll(t, l, &audit.Record{Event: audit.EventSessionCreate, SessionID: "old"})
	out := filepath.Join(t.TempDir(), "siem.jsonl")
	os.WriteFile(out, []byte("{\"kept\":true}\n"), 0o640)
	sink, err := OpenFile(out, true)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := NewMapper(FormatOCSF, "dev")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var n int
	// Follow starts with the last 2 records (appended before it starts,
	// so no wait for it is needed), then forwards each new one; those the
	// filter leaves out are not.
	appendAll(t, l, &audit.Record{Event: audit.EventSessionCreate, SessionID: "s1"},
		&audit.Record{Event: audit.EventDaemonStart, Daemon: &audit.DaemonInfo{Version: "9"}})
	go func() {
		var err error
		n, err = Follow(ctx, dir, 2, audit.Filter{Event: "session"}, m, sink)
		done <- err
	}()
	lines := waitLines(t, out, 2)
	if lines[0] != `{"kept":true}` || !strings.Contains(lines[1], `"session_id":"s1"`) {
		t.Fatalf("output:\n%s", strings.Join(lines, "\n"))
	}
	// Rotate the output away, then write enough to rotate the log too.
	if err := os.Rename(out, out+".1"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		appendAll(t, l, &audit.Record{Event: audit.EventSessionClose, SessionID: "s" + strconv.Itoa(i), Detail: map[string]string{"pad": strings.Repeat("x", 200)}})
	}
	lines = waitLines(t, out, 20)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n != 21 || len(lines) != 20 || !strings.Contains(lines[19], `"session_id":"s19"`) {
		t.Fatalf("forwarded %d; new file has %d lines:\n%s", n, len(lines), strings.Join(lines, "\n"))
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "audit-*.jsonl")); len(files) < 2 {
		t.Fatalf("the log did not rotate: %v", files)
	}
}

// TestSyslog sends records over a unix datagram socket and TCP and reads
// them back as RFC 5424 messages.
func TestSyslog(t *testing.T) {
	sock, nextDatagram := audittest.SyslogSocket(t)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()

	m, _ := NewMapper(FormatECS, "dev")
	recs := everyEvent()
	header := regexp.MustCompile(`^<(\d+)>1 (\S+) node-a skillbox - (\S+) - (\{.*\})$`)
	check := func(t *testing.T, got []byte, r *audit.Record, wantPri int) {
		t.Helper()
		g := header.FindSubmatch(got)
		if g == nil {
			t.Fatalf("not an RFC 5424 message: %q", got)
		}
		if string(g[1]) != strconv.Itoa(wantPri) || string(g[3]) != r.Event {
			t.Fatalf("pri %s event %s, want %d %s", g[1], g[3], wantPri, r.Event)
		}
		if _, err := time.Parse(time.RFC3339Nano, string(g[2])); err != nil {
			t.Fatal(err)
		}
		if !json.Valid(g[4]) {
			t.Fatalf("body is not JSON: %s", g[4])
		}
	}
	raw := func(r *audit.Record) Message {
		b, _ := json.Marshal(r)
		msg, err := m.Map(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	auth := recs[slices.IndexFunc(recs, func(r *audit.Record) bool { return r.Event == audit.EventAuthRefused })]

	t.Run("unixgram", func(t *testing.T) {
		s, err := DialSyslog("unixgram:" + sock)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Write(raw(auth)); err != nil {
			t.Fatal(err)
		}
		check(t, nextDatagram(), auth, 13*8+4) // log audit, warning
		// A record larger than a datagram is refused whole, named.
		big := raw(recs[1])
		big.Body = append([]byte(`{"x":"`), append(bytes.Repeat([]byte("a"), 4<<20), `"}`...)...)
		err = s.Write(big)
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "seq 2") {
			t.Fatalf("4 MiB datagram: %v", err)
		}
	})
	t.Run("tcp", func(t *testing.T) {
		s, err := DialSyslog("tcp:" + tl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c, err := tl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, r := range recs[:3] {
			if err := s.Write(raw(r)); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		br := bufio.NewReader(c)
		for _, r := range recs[:3] {
			ln, err := br.ReadString(' ')
			if err != nil {
				t.Fatal(err)
			}
			size, err := strconv.Atoi(strings.TrimSpace(ln))
			if err != nil {
				t.Fatalf("frame length %q: %v", ln, err)
			}
			msg := make([]byte, size)
			if _, err := io.ReadFull(br, msg); err != nil {
				t.Fatal(err)
			}
			check(t, msg, r, 13*8+6)
		}
	})
}

func TestParseSyslogAddr(t *testing.T) {
	for _, c := range []struct{ in, network, addr, err string }{
		{"/dev/log", "unixgram", "/dev/log", ""},
		{"unixgram:/run/s.sock", "unixgram", "/run/s.sock", ""},
		{"udp:127.0.0.1:514", "udp", "127.0.0.1:514", ""},
		{"tcp://localhost:601", "tcp", "localhost:601", ""},
		{"tcp:[::1]:601", "tcp", "[::1]:601", ""},
		{"tcp:10.0.0.1:601", "", "", "only a receiver on loopback"},
		{"udp:collector.example:514", "", "", "only a receiver on loopback"},
		{"udp:127.0.0.1", "", "", "missing port"},
		{"http:127.0.0.1:80", "", "", "unknown transport"},
		{"unixgram:", "", "", "socket's path"},
	} {
		t.Run(c.in, func(t *testing.T) {
			n, a, err := ParseSyslogAddr(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || n != c.network || a != c.addr {
				t.Fatalf("%q %q %v", n, a, err)
			}
		})
	}
}
