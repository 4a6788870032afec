package audit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FilterFields are the names ParseFilter reads: the CLI's flags (--session,
// ...) and the console's query parameters (?session=...) alike.
var FilterFields = []string{"replica", "session", "skill", "event", "uid", "since", "until"}

// FilterError names the field of a filter that could not be read.
type FilterError struct {
	Field string
	Err   error
}

func (e *FilterError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FilterError) Unwrap() error { return e.Err }

// ParseFilter reads a Filter from text fields (get returns "" for a field
// not given): the one reading of filters given by people, whether on the
// command line or in a console URL. Times are as ParseWhen reads them
// against now; a uid is numeric.
func ParseFilter(get func(field string) string, now time.Time) (Filter, error) {
	f := Filter{Replica: get("replica"), SessionID: get("session"), Skill: get("skill"), Event: get("event")}
	var err error
	if f.Since, err = ParseWhen(get("since"), now); err != nil {
		return f, &FilterError{Field: "since", Err: err}
	}
	if f.Until, err = ParseWhen(get("until"), now); err != nil {
		return f, &FilterError{Field: "until", Err: err}
	}
	if s := get("uid"); s != "" {
		u, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return f, &FilterError{Field: "uid", Err: fmt.Errorf("%q: give a numeric uid", s)}
		}
		u32 := uint32(u)
		f.UID = &u32
	}
	return f, nil
}

// ParseWhen reads a time: RFC 3339, a date or date and time (UTC), or an age
// before now (90m, 24h, 7d). "" is the zero time (no bound).
func ParseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(d); err == nil && n >= 0 && n <= maxAgeDays {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time: give RFC 3339 (2025-01-02T15:04:05Z), a date (2025-01-02) or an age (90m, 24h, 7d)", s)
}

// maxAgeDays bounds an age in days so that it cannot overflow a Duration.
const maxAgeDays = 100000
