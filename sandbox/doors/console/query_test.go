package console_test

import (
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/doors/console"
)

func TestParseAuditQueryVerify(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		raw  string
		full bool
		kind string
	}{
		{"", false, ""},
		{"verify=full&event=run.end", true, ""},
		{"verify=yes", false, api.KindInvalidParams},
		{"verify=full&verify=full", false, api.KindInvalidParams},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			p, err := console.ParseAuditQuery(tc.raw, now)
			if api.KindOf(err) != tc.kind && !(tc.kind == "" && err == nil) {
				t.Fatalf("%q: %v, want kind %q", tc.raw, err, tc.kind)
			}
			if err == nil && p.FullVerify != tc.full {
				t.Fatalf("%q: FullVerify %v, want %v", tc.raw, p.FullVerify, tc.full)
			}
		})
	}
}
