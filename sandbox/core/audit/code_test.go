package audit

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestNewCodeInfo(t *testing.T) {
	for _, tc := range []struct {
		name      string
		code      string
		withText  bool
		max       int
		text, enc string
		truncated bool
	}{
		{"kept whole", "print(1)\n", true, 64, "print(1)\n", "", false},
		{"hash only", "print(1)\n", false, 64, "", "", false},
		{"cut at the cap", "abcdef", true, 4, "abcd", "", true},
		{"cut before a split character", "abcé", true, 4, "abc", "", true},
		{"not UTF-8", "a\xffb", true, 64, base64.StdEncoding.EncodeToString([]byte("a\xffb")), "base64", false},
		{"not UTF-8, cut", "a\xffbcd", true, 3, base64.StdEncoding.EncodeToString([]byte("a\xffb")), "base64", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCodeInfo("python", []byte(tc.code), tc.withText, tc.max)
			if c.Text != tc.text || c.Encoding != tc.enc || c.Truncated != tc.truncated {
				t.Errorf("got text %q enc %q truncated %v", c.Text, c.Encoding, c.Truncated)
			}
			// Size and hash are always of the whole code.
			if c.Size != int64(len(tc.code)) || len(c.SHA256) != 64 || c.Language != "python" {
				t.Errorf("size %d sha %q", c.Size, c.SHA256)
			}
		})
	}
	if a, b := NewCodeInfo("python", []byte(strings.Repeat("x", 10)), true, 4), NewCodeInfo("python", []byte(strings.Repeat("x", 11)), true, 4); a.Text != b.Text || a.SHA256 == b.SHA256 {
		t.Error("codes that share their kept text must still differ by hash")
	}
}
