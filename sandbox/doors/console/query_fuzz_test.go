package console_test

import (
	"testing"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/doors/console"
)

// FuzzParseQuery: any query string either parses or is refused as
// invalid_params; it never panics, and a parsed limit and bucket are in
// range.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "session=s&skill=a&uid=1000&event=run,confirmation.*&since=7d&until=2025-01-02&limit=10",
		"since=2025-01-02T15:04:05Z", "uid=-1", "limit=0", "limit=99999999999999999999", "a=1", "skill=a&skill=b", "%zz",
		"bucket=1h", "bucket=-1h", "since=9999999999d", "since=99999999h"} {
		f.Add(s)
	}
	now := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := console.ParseAuditQuery(raw, now)
		if err != nil && api.KindOf(err) != api.KindInvalidParams {
			t.Fatalf("%q: %v is not invalid_params", raw, err)
		}
		if err == nil && p.Limit < 0 {
			t.Fatalf("%q: limit %d", raw, p.Limit)
		}
		h, err := console.ParseHistoryQuery("s", raw, now)
		if err != nil && api.KindOf(err) != api.KindInvalidParams {
			t.Fatalf("%q: %v is not invalid_params", raw, err)
		}
		if err == nil && h.Bucket < 0 {
			t.Fatalf("%q: bucket %s", raw, h.Bucket)
		}
	})
}
