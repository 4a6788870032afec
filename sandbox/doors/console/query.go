package console

import (
	"net/url"
	"strconv"
	"time"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/service"
)

// ParseAuditQuery reads an audit search from a URL's query: the filter's
// fields (audit.FilterFields: session, skill, uid, event, since, until,
// replica), limit, and verify=full (a full verify of the chain, for
// approvers). A parameter given twice or unknown is refused, so a typo is
// not silently a wider search.
func ParseAuditQuery(raw string, now time.Time) (service.AuditSearchParams, error) {
	q, err := strictQuery(raw, append([]string{"limit", "verify"}, audit.FilterFields...))
	if err != nil {
		return service.AuditSearchParams{}, err
	}
	f, err := audit.ParseFilter(q.Get, now)
	if err != nil {
		return service.AuditSearchParams{}, errkind.Errorf(api.ErrInvalidParams, "%v", err)
	}
	p := service.AuditSearchParams{Filter: f}
	switch v := q.Get("verify"); v {
	case "":
	case "full":
		p.FullVerify = true
	default:
		return p, errkind.Errorf(api.ErrInvalidParams, "verify %q: give verify=full (approvers only) or leave it out", v)
	}
	if s := q.Get("limit"); s != "" {
		if p.Limit, err = strconv.Atoi(s); err != nil || p.Limit < 1 {
			return p, errkind.Errorf(api.ErrInvalidParams, "limit %q: give a positive number", s)
		}
	}
	return p, nil
}

// ParseHistoryQuery reads a skill history request: since, until (as audit
// filters read them) and bucket (a Go duration such as 1h or 15m).
func ParseHistoryQuery(skill, raw string, now time.Time) (service.SkillHistoryParams, error) {
	q, err := strictQuery(raw, []string{"since", "until", "bucket"})
	if err != nil {
		return service.SkillHistoryParams{}, err
	}
	f, err := audit.ParseFilter(func(k string) string {
		if k == "since" || k == "until" {
			return q.Get(k)
		}
		return ""
	}, now)
	if err != nil {
		return service.SkillHistoryParams{}, errkind.Errorf(api.ErrInvalidParams, "%v", err)
	}
	p := service.SkillHistoryParams{Skill: skill, Since: f.Since, Until: f.Until}
	if s := q.Get("bucket"); s != "" {
		if p.Bucket, err = time.ParseDuration(s); err != nil || p.Bucket <= 0 {
			return p, errkind.Errorf(api.ErrInvalidParams, "bucket %q: give a duration such as 15m, 1h or 24h", s)
		}
	}
	return p, nil
}

// strictQuery parses raw, refusing unknown and repeated parameters.
func strictQuery(raw string, known []string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, errkind.Errorf(api.ErrInvalidParams, "query: %v", err)
	}
	allowed := map[string]bool{}
	for _, k := range known {
		allowed[k] = true
	}
	for k, vs := range q {
		if !allowed[k] {
			return nil, errkind.Errorf(api.ErrInvalidParams, "unknown query parameter %q (known: %v)", k, known)
		}
		if len(vs) > 1 {
			return nil, errkind.Errorf(api.ErrInvalidParams, "query parameter %q is given %d times; give it once", k, len(vs))
		}
	}
	return q, nil
}
