package egress

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"io"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
)

const testSecret = "s3cr3t/t0ken+value=42"

var testSecrets = []Secret{{Name: "API_TOKEN", Value: testSecret, Hosts: []string{"example.com"}, Header: "Authorization: Bearer %s"}}

func TestRedactorForms(t *testing.T) {
	r := NewRedactor(testSecrets)
	ph := Placeholder("API_TOKEN")
	basic := base64.StdEncoding.EncodeToString([]byte("user:" + testSecret))
	tests := []struct {
		name, in string
	}{
		{"plain", "Bearer " + testSecret},
		{"query escaped", "q=" + url.QueryEscape(testSecret)},
		{"path escaped", "/p/" + url.PathEscape(testSecret) + "/x"},
		{"json", `{"auth":"` + strings.ReplaceAll(testSecret, "/", `\/`) + `"}`},
		{"base64", "x " + base64.StdEncoding.EncodeToString([]byte(testSecret))},
		{"base64 url raw", base64.RawURLEncoding.EncodeToString([]byte(testSecret))},
		{"basic credentials", "Basic " + basic},
		{"offset 1", base64.StdEncoding.EncodeToString([]byte("a" + testSecret + "zz"))},
		{"offset 2", base64.RawURLEncoding.EncodeToString([]byte("ab" + testSecret + "z"))},
		{"twice", testSecret + testSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := r.String(tt.in)
			if tt.name == "json" {
				// encoding/json escapes no "/", so this form is the raw
				// value around escaped slashes: not one we know.
				if strings.Contains(got, testSecret) {
					t.Fatalf("value left in %q", got)
				}
				return
			}
			if !strings.Contains(got, ph) {
				t.Fatalf("%q: no placeholder in %q", tt.in, got)
			}
			if leaks(got) {
				t.Fatalf("%q redacted to %q still holds the secret", tt.in, got)
			}
		})
	}
	if got := r.String("nothing to see"); got != "nothing to see" {
		t.Fatalf("clean text changed: %q", got)
	}
	var nilR *Redactor
	if nilR.String("x") != "x" || NewRedactor(nil) != nil {
		t.Fatal("a redactor of no secrets changes text")
	}
}

// leaks reports whether s holds the secret in a form a client decodes
// easily.
func leaks(s string) bool {
	if strings.Contains(s, testSecret) || strings.Contains(s, url.QueryEscape(testSecret)) {
		return true
	}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '"' }) {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
			if b, err := enc.DecodeString(f); err == nil && bytes.Contains(b, []byte(testSecret)) {
				return true
			}
		}
	}
	return false
}

// A value split across reads is found at every split point, and the
// streamed result is the same as redacting the whole.
func TestRedactorStreaming(t *testing.T) {
	r := NewRedactor(testSecrets)
	doc := "head " + testSecret + " mid " + base64.StdEncoding.EncodeToString([]byte(testSecret)) + " tail " + testSecret
	want := r.String(doc)
	for split := 0; split <= len(doc); split++ {
		src := io.MultiReader(strings.NewReader(doc[:split]), strings.NewReader(doc[split:]))
		got, err := io.ReadAll(r.Reader(src))
		if err != nil || string(got) != want {
			t.Fatalf("split at %d: %q, %v; want %q", split, got, err, want)
		}
	}
	got, err := io.ReadAll(r.Reader(iotest.OneByteReader(strings.NewReader(doc))))
	if err != nil || string(got) != want {
		t.Fatalf("one byte at a time: %q, %v", got, err)
	}
	got, err = io.ReadAll(r.Reader(iotest.DataErrReader(strings.NewReader(doc))))
	if err != nil || string(got) != want {
		t.Fatalf("data with EOF: %q, %v", got, err)
	}
}

func TestDecodeBody(t *testing.T) {
	payload := []byte("echo: Authorization: Bearer " + testSecret)
	var gz, zl, raw bytes.Buffer
	gw := gzip.NewWriter(&gz)
	gw.Write(payload)
	gw.Close()
	zw := zlib.NewWriter(&zl)
	zw.Write(payload)
	zw.Close()
	fw, _ := flate.NewWriter(&raw, 5)
	fw.Write(payload)
	fw.Close()
	tests := []struct {
		coding string
		body   []byte
		ok     bool
	}{
		{"", payload, true},
		{"identity", payload, true},
		{"gzip", gz.Bytes(), true},
		{"X-Gzip", gz.Bytes(), true},
		{"deflate", zl.Bytes(), true},
		{"deflate", raw.Bytes(), true},
		{"br", payload, false},
	}
	for _, tt := range tests {
		t.Run(tt.coding, func(t *testing.T) {
			r, ok, err := decodeBody(tt.coding, bytes.NewReader(tt.body))
			if ok != tt.ok {
				t.Fatalf("ok %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("decoded %q, %v", got, err)
			}
		})
	}
}

// FuzzRedactor: streaming (split anywhere) gives what redacting the whole
// does, text without any form is left alone, and no plain value survives.
func FuzzRedactor(f *testing.F) {
	f.Add("abc", "x abc y", 1)
	f.Add("tok-123456789", "tok-123tok-123456789", 7)
	f.Add("aaaaaaaa", "aaaaaaaaaaaaaaaaa", 3)
	f.Fuzz(func(t *testing.T, value, text string, split int) {
		if value == "" || len(value) > 256 || len(text) > 4096 {
			return
		}
		r := NewRedactor([]Secret{{Name: "S", Value: value}})
		whole := r.String(text)
		if split < 0 {
			split = -split
		}
		if len(text) > 0 {
			split %= len(text) + 1
		} else {
			split = 0
		}
		got, err := io.ReadAll(r.Reader(io.MultiReader(strings.NewReader(text[:split]), iotest.HalfReader(strings.NewReader(text[split:])))))
		if err != nil || string(got) != whole {
			t.Fatalf("streamed %q, whole %q (%v)", got, whole, err)
		}
		found := false
		for _, p := range r.pats {
			if bytes.Contains([]byte(text), p) {
				found = true
			}
		}
		if !found && whole != text {
			t.Fatalf("%q changed to %q without a secret in it", text, whole)
		}
		if strings.Contains(whole, value) && !strings.Contains(Placeholder("S"), value) && !strings.Contains(whole, Placeholder("S")) {
			t.Fatalf("%q still holds %q", whole, value)
		}
	})
}
