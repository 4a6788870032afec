package service

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os/user"
	"strconv"
	"strings"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/audit"
	"github.com/skillbox/skillbox/sandbox/core/store"
)

// IsApprover reports whether the config names caller as an approver.
func (s *Service) IsApprover(caller api.Peer) bool {
	name := ""
	if u, err := user.LookupId(strconv.FormatUint(uint64(caller.UID), 10)); err == nil {
		name = u.Username
	}
	return s.cfg.IsApprover(caller.UID, name)
}

func (s *Service) confirmStore() (*store.ConfirmationStore, error) {
	if s.confirms == nil {
		return nil, errkind.Errorf(errkind.Unavailable, "this skillbox keeps no confirmations (use the daemon)")
	}
	return s.confirms, nil
}

// ListConfirmations implements api.Service: approvers see every request,
// others only their own.
func (s *Service) ListConfirmations(ctx context.Context, caller api.Peer, p api.ListConfirmationsParams) (*api.ListConfirmationsResult, error) {
	cs, err := s.confirmStore()
	if err != nil {
		return nil, err
	}
	all, err := cs.List(store.ConfirmationFilter{SessionID: p.SessionID, State: p.State})
	if err != nil {
		return nil, err
	}
	approver := s.IsApprover(caller)
	out := []*api.Confirmation{}
	for _, c := range all {
		if approver || c.RequestedBy == caller.UID {
			out = append(out, c)
		}
	}
	return &api.ListConfirmationsResult{Confirmations: out}, nil
}

// ApproveConfirmation implements api.Service.
func (s *Service) ApproveConfirmation(ctx context.Context, caller api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error) {
	return s.decideConfirmation(ctx, caller, p.ID, true)
}

// DenyConfirmation implements api.Service.
func (s *Service) DenyConfirmation(ctx context.Context, caller api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error) {
	return s.decideConfirmation(ctx, caller, p.ID, false)
}

func (s *Service) decideConfirmation(ctx context.Context, caller api.Peer, id string, approve bool) (*api.Confirmation, error) {
	cs, err := s.confirmStore()
	if err != nil {
		return nil, err
	}
	event, method := audit.EventConfirmApprove, api.MethodConfirmationsApprove
	if !approve {
		event, method = audit.EventConfirmDeny, api.MethodConfirmationsDeny
	}
	r := base(ctx, caller, method, event, "")
	r.Confirmation = &audit.ConfirmationInfo{ID: id}
	if !s.IsApprover(caller) {
		r.Outcome, r.Error = "refused", "not an approver"
		err := errkind.Errorf(errkind.Denied, "uid %d is not an approver: the config's daemon.approvers names who may approve", caller.UID)
		if s.record(ctx, r) == nil {
			err = api.MarkAudited(err)
		}
		return nil, err
	}
	var c *api.Confirmation
	if approve {
		c, err = cs.Approve(id, caller)
	} else {
		c, err = cs.Deny(id, caller)
	}
	if err != nil {
		r.Outcome, r.Error = "refused", err.Error()
		if s.record(ctx, r) == nil {
			err = api.MarkAudited(err)
		}
		return nil, err
	}
	if s.metrics != nil {
		s.metrics.ConfirmationDecided(c)
	}
	r.SessionID = c.SessionID
	r.Confirmation.Digest, r.Confirmation.Rule, r.Confirmation.Reason = c.Digest, c.Rule, c.Reason
	r.Outcome = string(c.State)
	if err := s.record(ctx, r); err != nil {
		return nil, err
	}
	return c, nil
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// decodeFiles turns the wire's input entries into the runtime's and
// checks them (names confined to the working directory, kinds, modes, no
// entry under a file or link) before anything is decided, audited or
// confirmed; an error names the entry as files[i] "name".
func decodeFiles(in []api.File) ([]runtime.InputFile, error) {
	if len(in) > runtime.MaxInputEntries {
		return nil, errkind.Errorf(errkind.InvalidParams, "files has %d entries, at most %d", len(in), runtime.MaxInputEntries)
	}
	files := make([]runtime.InputFile, 0, len(in))
	for i, f := range in {
		bad := func(format string, args ...any) error {
			return errkind.Errorf(errkind.InvalidParams, "files[%d] %s: %s", i, audit.ClipText(strconv.Quote(f.Name), 140), fmt.Sprintf(format, args...))
		}
		if err := runtime.ValidateInputName(f.Name); err != nil {
			return nil, errkind.Errorf(errkind.InvalidParams, "files[%d]: %s", i, errkind.Detail(err, runtime.ErrInvalidJob))
		}
		e := runtime.InputFile{Name: f.Name, Mode: f.Mode}
		switch f.Type {
		case "", api.FileTypeFile:
			if f.Target != "" {
				return nil, bad("a file has no target (use type %q for a link)", api.FileTypeSymlink)
			}
			data, err := base64.StdEncoding.DecodeString(f.Content)
			if err != nil {
				return nil, bad("content is not base64: %v", err)
			}
			e.Data = data
		case api.FileTypeDir:
			if f.Content != "" || f.Target != "" {
				return nil, bad("a directory has no content or target")
			}
			e.Kind = runtime.InputDir
		case api.FileTypeSymlink:
			if f.Content != "" {
				return nil, bad("a symlink has no content")
			}
			e.Kind, e.Target = runtime.InputSymlink, f.Target
		default:
			return nil, bad("unknown type %q: use %q (the default), %q or %q", audit.ClipText(f.Type, 32), api.FileTypeFile, api.FileTypeDir, api.FileTypeSymlink)
		}
		files = append(files, e)
	}
	// The whole set (duplicates, entries under a file or link, modes, link
	// targets); the workdir size is checked against the run's limits later.
	if err := runtime.ValidateInputs(files, math.MaxInt64); err != nil {
		return nil, errkind.Errorf(errkind.InvalidParams, "files: %s", errkind.Detail(err, runtime.ErrInvalidJob))
	}
	return files, nil
}

// toolInput is what policy sees of a run: its path and args.
func toolInput(path string, args []string) []byte {
	b, _ := json.Marshal(map[string]any{"path": path, "args": args})
	return b
}
