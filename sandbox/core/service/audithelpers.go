package service

import (
	"context"
	"strconv"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/store"
)

// maxAuditRequestID bounds a request id in audit records (ids are the
// client's and may be long).
const maxAuditRequestID = 128

// AuditRequestID is a front end's request id as audit records keep it:
// clipped to 128 bytes.
func AuditRequestID(id string) string { return audit.ClipText(id, maxAuditRequestID) }

// base is the record every audited call starts from: who asked, in which
// session, with which request.
func base(ctx context.Context, caller api.Peer, method, event, session string) *audit.Record {
	p := caller
	return &audit.Record{Event: event, Peer: &p, SessionID: session, RequestID: AuditRequestID(api.RequestIDFrom(ctx)), Method: method}
}

// record appends to the audit log through the one journal; a failure is
// logged there and returned as the refusal.
func (s *Service) record(ctx context.Context, r *audit.Record) error {
	return s.journal.Record(ctx, r)
}

// sessionExpired audits a session a sweep removed.
func (s *Service) sessionExpired(ses store.Session) {
	s.grants.forget(ses.ID)
	s.engine.Sessions().CloseSession(context.Background(), ses.ID, "session expired")
	s.removeSessionWorkspace(ses.ID)
	s.record(context.Background(), &audit.Record{
		Event: audit.EventSessionClose, SessionID: ses.ID, Outcome: "expired",
		Detail: map[string]string{"owner_uid": strconv.FormatUint(uint64(ses.OwnerUID), 10), "last_used": ses.LastUsed.UTC().Format(time.RFC3339)},
	})
}

// confirmationExpired audits a confirmation that timed out (once: the store
// calls this when it records the expiry).
func (s *Service) confirmationExpired(c api.Confirmation) {
	uid := c.RequestedBy
	was := string(api.ConfirmationPending)
	if c.DecidedAt != nil {
		was = string(api.ConfirmationApproved)
	}
	s.record(context.Background(), &audit.Record{
		Event: audit.EventConfirmExpire, SessionID: c.SessionID, Outcome: string(api.ConfirmationExpired),
		Confirmation: &audit.ConfirmationInfo{ID: c.ID, Digest: c.Digest, Rule: c.Rule, Reason: c.Reason, RequestedBy: &uid, Expires: c.Expires},
		Detail:       map[string]string{"was": was},
	})
}
