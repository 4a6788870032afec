package console

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/core/service"
	"github.com/skillbox/skillbox/sandbox/doors/connlimit"
	"github.com/skillbox/skillbox/sandbox/doors/jsonrpc"
)

// Prefix is the versioned root of the API.
const Prefix = "/api/v1"

// Service is what the console calls: the daemon's service.
type Service interface {
	IsApprover(caller api.Peer) bool
	ListConfirmations(ctx context.Context, caller api.Peer, p api.ListConfirmationsParams) (*api.ListConfirmationsResult, error)
	ShowConfirmation(ctx context.Context, caller api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error)
	ApproveConfirmation(ctx context.Context, caller api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error)
	DenyConfirmation(ctx context.Context, caller api.Peer, p api.ConfirmationIDParams) (*api.Confirmation, error)
	ListRuns(ctx context.Context, caller api.Peer, p api.RunsListParams) (*api.RunsListResult, error)
	LiveRuns(ctx context.Context, caller api.Peer) (*service.LiveRunsResult, error)
	CancelRun(ctx context.Context, caller api.Peer, p api.CancelRunParams) (*api.CancelRunResult, error)
	FollowRun(ctx context.Context, caller api.Peer, runID string) (*service.RunFollower, error)
	ListProposals(ctx context.Context, caller api.Peer, p api.ListProposalsParams) (*api.ListProposalsResult, error)
	ShowProposal(ctx context.Context, caller api.Peer, p api.ProposalIDParams) (*api.Proposal, error)
	ApproveProposal(ctx context.Context, caller api.Peer, p api.ProposalIDParams) (*api.Proposal, error)
	RejectProposal(ctx context.Context, caller api.Peer, p api.ProposalIDParams) (*api.Proposal, error)
	SearchAudit(ctx context.Context, caller api.Peer, p service.AuditSearchParams) (*service.AuditSearchResult, error)
	SkillHistory(ctx context.Context, caller api.Peer, p service.SkillHistoryParams) (*service.SkillHistory, error)
}

var _ Service = (*service.Service)(nil)

// ConsoleSocket is the console's socket beside the daemon's main socket:
// /run/skillbox/skillbox.sock → /run/skillbox/skillbox-console.sock.
func ConsoleSocket(mainSocket string) string {
	base := strings.TrimSuffix(filepath.Base(mainSocket), ".sock")
	return filepath.Join(filepath.Dir(mainSocket), base+"-console.sock")
}

// Whoami is GET /api/v1/whoami: who the daemon sees, and whether the UI
// should offer approve buttons.
type Whoami struct {
	UID      uint32 `json:"uid"`
	GID      uint32 `json:"gid"`
	Approver bool   `json:"approver"`
}

// maxBody bounds a request body (decisions carry a note at most).
const maxBody = 64 << 10

type peerKey struct{}

// ConnContext puts a connection's kernel-reported peer into its requests'
// context (http.Server.ConnContext). A connection without credentials
// gets none, and its requests are refused.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	p, err := jsonrpc.PeerCredentials(c)
	if err != nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, p)
}

// Handler serves the API for svc.
func Handler(svc Service, log hclog.Logger) http.Handler {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	h := &handler{svc: svc, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"/whoami", h.whoami)
	mux.HandleFunc("GET "+Prefix+"/confirmations", call(h, func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		q := r.URL.Query()
		return svc.ListConfirmations(ctx, p, api.ListConfirmationsParams{SessionID: q.Get("session"), State: q.Get("state")})
	}))
	mux.HandleFunc("GET "+Prefix+"/confirmations/{id}", call(h, func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		return svc.ShowConfirmation(ctx, p, api.ConfirmationIDParams{ID: r.PathValue("id")})
	}))
	mux.HandleFunc("POST "+Prefix+"/confirmations/{id}/approve", call(h, func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		return svc.ApproveConfirmation(ctx, p, api.ConfirmationIDParams{ID: r.PathValue("id")})
	}))
	mux.HandleFunc("POST "+Prefix+"/confirmations/{id}/deny", call(h, func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		return svc.DenyConfirmation(ctx, p, api.ConfirmationIDParams{ID: r.PathValue("id")})
	}))
	mux.HandleFunc("GET "+Prefix+"/sessions/{session}/runs", call(h, func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		return svc.ListRuns(ctx, p, api.RunsListParams{SessionID: r.PathValue("session")})
	}))
	mux.HandleFunc("GET "+Prefix+"/runs", call(h, func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		if _, err := strictQuery(r.URL.RawQuery, nil); err != nil {
			return nil, err
		}
		return svc.LiveRuns(ctx, p)
	}))
	mux.HandleFunc("POST "+Prefix+"/runs/{run}/cancel", call(h, func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		return svc.CancelRun(ctx, p, api.CancelRunParams{RunID: r.PathValue("run")})
	}))
	mux.HandleFunc("GET "+Prefix+"/runs/{run}/output", h.runOutput)
	mux.HandleFunc("GET "+Prefix+"/proposals", call(h, func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		q := r.URL.Query()
		return svc.ListProposals(ctx, p, api.ListProposalsParams{Skill: q.Get("skill"), State: q.Get("state")})
	}))
	mux.HandleFunc("GET "+Prefix+"/proposals/{id}", call(h, func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		return svc.ShowProposal(ctx, p, api.ProposalIDParams{ID: r.PathValue("id")})
	}))
	mux.HandleFunc("POST "+Prefix+"/proposals/{id}/approve", call(h, proposalDecision(svc.ApproveProposal)))
	mux.HandleFunc("POST "+Prefix+"/proposals/{id}/reject", call(h, proposalDecision(svc.RejectProposal)))
	mux.HandleFunc("GET "+Prefix+"/audit", call(h, func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		params, err := ParseAuditQuery(r.URL.RawQuery, time.Now())
		if err != nil {
			return nil, err
		}
		return svc.SearchAudit(ctx, p, params)
	}))
	mux.HandleFunc("GET "+Prefix+"/skills/{skill}/history", call(h, func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		params, err := ParseHistoryQuery(r.PathValue("skill"), r.URL.RawQuery, time.Now())
		if err != nil {
			return nil, err
		}
		return svc.SkillHistory(ctx, p, params)
	}))
	mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errkind.Errorf(api.ErrNotFound, "%s %s is not part of the console API (%s/...)", r.Method, r.URL.Path, Prefix))
	})
	return mux
}

type handler struct {
	svc Service
	log hclog.Logger
}

// peerOf is the request's peer, or an error when the connection had none.
func peerOf(r *http.Request) (api.Peer, error) {
	p, ok := r.Context().Value(peerKey{}).(api.Peer)
	if !ok {
		return api.Peer{}, errkind.Errorf(api.ErrDenied, "the connection's peer credentials are unknown: the console answers on its Unix socket only")
	}
	return p, nil
}

func (h *handler) whoami(w http.ResponseWriter, r *http.Request) {
	p, err := peerOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Whoami{UID: p.UID, GID: p.GID, Approver: h.svc.IsApprover(p)})
}

// call adapts a service call to a handler: the peer in, the result or the
// error out as JSON.
func call(h *handler, f func(context.Context, api.Peer, *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := peerOf(r)
		if err != nil {
			writeError(w, err)
			return
		}
		res, err := f(r.Context(), p, r)
		if err != nil {
			if api.KindOf(err) == api.KindInternal {
				h.log.Warn("console call failed", "method", r.Method, "path", r.URL.Path, "uid", p.UID, "error", err)
			}
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// proposalDecision calls decide with the proposal of the path and the
// body's note.
func proposalDecision(decide func(context.Context, api.Peer, api.ProposalIDParams) (*api.Proposal, error)) func(context.Context, api.Peer, *http.Request) (any, error) {
	return func(ctx context.Context, p api.Peer, r *http.Request) (any, error) {
		note, err := decisionNote(r)
		if err != nil {
			return nil, err
		}
		return decide(ctx, p, api.ProposalIDParams{ID: r.PathValue("id"), Note: note})
	}
}

// decisionNote reads a decision's optional body {"note": "..."}.
func decisionNote(r *http.Request) (string, error) {
	var body struct {
		Note string `json:"note"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		return "", errkind.Errorf(api.ErrInvalidParams, "the body is not {\"note\": \"...\"}: %v", err)
	}
	return body.Note, nil
}

// ErrorBody is how an error is answered.
type ErrorBody struct {
	Error *api.Error `json:"error"`
}

// statusOf maps an error kind to its HTTP status.
var statusOf = map[string]int{
	api.KindNotFound:             http.StatusNotFound,
	api.KindInvalidParams:        http.StatusBadRequest,
	api.KindDenied:               http.StatusForbidden,
	api.KindConfirmationRequired: http.StatusConflict,
	api.KindLimitExceeded:        http.StatusTooManyRequests,
	api.KindUnavailable:          http.StatusServiceUnavailable,
	api.KindInternal:             http.StatusInternalServerError,
}

func writeError(w http.ResponseWriter, err error) {
	e := jsonrpc.ToRPCError(err)
	status, ok := statusOf[e.Kind]
	if !ok {
		status = http.StatusInternalServerError
	}
	writeJSON(w, status, ErrorBody{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Server serves the API on a listener until Shutdown.
func Server(svc Service, log hclog.Logger) *http.Server {
	return &http.Server{
		Handler:           Handler(svc, log),
		ConnContext:       ConnContext,
		ReadHeaderTimeout: connlimit.HeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       connlimit.IdleTimeout,
		MaxHeaderBytes:    connlimit.MaxHeaderBytes,
	}
}
