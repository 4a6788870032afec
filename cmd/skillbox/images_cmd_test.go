package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func runImagesCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	err := app.Run(append([]string{"skillbox", "images"}, args...))
	return out.String(), err
}

func TestImagesListEmptyStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	out, err := runImagesCLI(t, "list", "--dir", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var entries []listEntry
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(entries) != 4 || entries[0].Name != "node" || entries[0].Built {
		t.Errorf("entries: %+v", entries)
	}
	out, err = runImagesCLI(t, "list", "--dir", dir)
	if err != nil || !strings.Contains(out, "not built (skillbox images build python)") {
		t.Errorf("table: %q %v", out, err)
	}
}

func TestImagesBuildUnknownName(t *testing.T) {
	_, err := runImagesCLI(t, "build", "--dir", filepath.Join(t.TempDir(), "store"), "cobol")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(ee.msg, "known: node, python, python-slim, shell") {
		t.Errorf("err = %v", err)
	}
	_, err = runImagesCLI(t, "list", "--recipes", filepath.Join(t.TempDir(), "missing"))
	if !errors.As(err, &ee) || ee.code != 2 {
		t.Errorf("missing recipes dir: %v", err)
	}
}

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Second: "just now", 61 * time.Second: "1 minute ago", 5 * time.Minute: "5 minutes ago",
		3 * time.Hour: "3 hours ago", 72 * time.Hour: "3 days ago",
	} {
		if got := age(time.Now().Add(-d)); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
	if age(time.Time{}) != "?" {
		t.Error("zero time")
	}
}
