// Package mcp serves skillbox's tool calls as a Model Context Protocol
// server (the official Go SDK), so agents that speak MCP (Claude Code,
// Codex, Cursor, any SDK-built app) plug skillbox in with one config entry.
//
// It is a front end like the JSON-RPC adapter: every request is decoded,
// handed to an api.Service (the engine in-process, or the daemon through
// the Go client), and its answer encoded. Policy, confirmations and audit
// happen in the service; nothing here decides what may run. One MCP
// connection is one skillbox session.
//
// Besides tools it serves each model-invocable skill as a prompt, skills as
// resources under the MCP skills extension, progress notifications from a
// run's events, and confirmations through elicitation.
package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/skillbox/skillbox/runtime/errkind"
	"github.com/skillbox/skillbox/sandbox/api"
)

// DefaultPollInterval is how often a connection looks for changed skills
// when Options.PollInterval is zero.
const DefaultPollInterval = 3 * time.Second

// Options configure a Server.
type Options struct {
	// Caller is who the MCP client acts as: the user who started this
	// process (the host that spawned it). The service checks policy and
	// writes the audit trail under this identity; in bridged mode the
	// daemon sees the process's own credentials instead.
	Caller api.Peer
	// Version is reported as the server's version.
	Version string
	// ElicitApprovals lets a run that needs confirmation ask the user at
	// the client (MCP elicitation) when the client supports it. An accepted
	// answer is an approval by Caller, so it only helps when the service
	// counts Caller as an approver; otherwise the approval is refused and
	// the tool error names the confirmation for an approver.
	ElicitApprovals bool
	// PollInterval is how often each connection asks the service whether
	// the skills changed (to refresh prompts, resources and the catalog);
	// negative disables it.
	PollInterval time.Duration
	// OnRefused is told about each message the stdio (or IO) transport
	// refuses before the SDK reads it (not JSON, a member named twice,
	// over-long), before the client is answered: skillbox mcp audits them
	// (service.AuditRefusal). It may block for an fsync; nil: only logged.
	OnRefused func(api.Refusal)
	// Workspace is the directory runs work on when the client lists no
	// file:// root ("": none): skillbox mcp's --workspace, by default the
	// directory it was started in.
	Workspace string
	// ResultBytes bounds what one run's tool result takes (text and
	// structured content together, whatever the script wrote); zero is
	// DefaultResultBytes.
	ResultBytes int
	// Tracer, when set (daemon.traces, self-contained), starts each tool
	// call's root span.
	Tracer trace.Tracer
	Logger hclog.Logger
}

// Server adapts an api.Service to MCP. It is safe for concurrent use; each
// Connect serves one client.
type Server struct {
	svc  api.Service
	opts Options
	log  hclog.Logger
	// manifests caches per-file digests of skills by skill digest.
	manifests *manifestCache
}

// New returns a Server over svc.
func New(svc api.Service, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = DefaultPollInterval
	}
	return &Server{svc: svc, opts: opts, log: log, manifests: newManifestCache()}
}

// Serve serves one client on t (for instance &sdk.StdioTransport{}) until it
// disconnects or ctx ends.
func (s *Server) Serve(ctx context.Context, t sdk.Transport) error {
	c, err := s.Connect(ctx, t)
	if err != nil {
		return err
	}
	return c.Wait()
}

// Conn is one client's connection: an MCP session bound to a skillbox
// session.
type Conn struct {
	s       *Server
	mcp     *sdk.Server
	ss      *sdk.ServerSession
	session string
	caller  api.Peer
	cancel  context.CancelFunc
	done    chan struct{}

	mu sync.Mutex
	// catalog is the last skill list seen, keyed for change detection.
	catalog     []api.SkillInfo
	catalogKey  string
	prompts     []string // registered prompt names
	skillDocs   []string // registered SKILL.md resource URIs
	resSession  string   // the session resource reads load skills into
	resMu       sync.Mutex
	elicitMu    sync.Mutex
	elicitTable map[string]string // confirmation id -> tool, for elicitations this connection asked
	rootDir     string            // the workspace from the client's roots ("": none listed)
	rootsKnown  bool              // rootDir holds the client's answer (or it has no roots)
	runs        *runStore         // what results point to: whole logs, files outside the workspace
}

// Connect starts serving one client on t and returns at once. On the stdio
// and IO transports each message is checked before the SDK decodes it (see
// guard): one holding a member name twice is answered with an error and not
// run.
func (s *Server) Connect(ctx context.Context, t sdk.Transport) (*Conn, error) {
	sess, err := s.svc.CreateSession(ctx, s.opts.Caller, api.CreateSessionParams{})
	if err != nil {
		return nil, fmt.Errorf("creating the skillbox session: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &Conn{
		s:           s,
		session:     sess.SessionID,
		caller:      s.opts.Caller,
		cancel:      cancel,
		done:        make(chan struct{}),
		elicitTable: map[string]string{},
		runs:        newRunStore(maxStoredRuns, maxStoredBytes),
	}
	c.mcp = sdk.NewServer(&sdk.Implementation{Name: "skillbox", Title: "skillbox", Version: s.opts.Version}, &sdk.ServerOptions{
		Capabilities: &sdk.ServerCapabilities{
			Tools:      &sdk.ToolCapabilities{ListChanged: true},
			Prompts:    &sdk.PromptCapabilities{ListChanged: true},
			Resources:  &sdk.ResourceCapabilities{ListChanged: true},
			Extensions: map[string]any{SkillsExtension: map[string]any{}},
		},
		// ListRoots is a request to the client: it cannot wait inside
		// the handler of one of the client's messages.
		InitializedHandler:      func(_ context.Context, r *sdk.InitializedRequest) { go c.refreshRoots(ctx, r.Session) },
		RootsListChangedHandler: func(_ context.Context, r *sdk.RootsListChangedRequest) { go c.refreshRoots(ctx, r.Session) },
	})
	// The instructions are rendered when a client asks for them, so a
	// client that (re)initializes after a reload gets the current catalog.
	c.mcp.AddReceivingMiddleware(c.instructionsMiddleware)
	if s.opts.Tracer != nil {
		c.mcp.AddReceivingMiddleware(c.traceMiddleware)
	}
	c.addTools()
	c.addRunResources()
	if err := c.addSkillsExtension(); err != nil {
		cancel()
		return nil, err
	}
	if err := c.refresh(ctx); err != nil {
		s.log.Warn("listing skills failed; prompts and resources start empty", "error", err)
	}
	ss, err := c.mcp.Connect(ctx, s.guard(t), nil)
	if err != nil {
		cancel()
		c.closeSessions()
		return nil, err
	}
	c.ss = ss
	go c.poll(ctx)
	go func() {
		defer close(c.done)
		_ = ss.Wait()
		cancel()
		c.closeSessions()
	}()
	return c, nil
}

// Wait blocks until the client disconnects and the session is closed.
func (c *Conn) Wait() error {
	<-c.done
	return nil
}

// Close disconnects the client and closes its skillbox session.
func (c *Conn) Close() error {
	err := c.ss.Close()
	<-c.done
	return err
}

// SessionID is the skillbox session this connection acts in.
func (c *Conn) SessionID() string { return c.session }

func (c *Conn) closeSessions() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := []string{c.session}
	c.resMu.Lock()
	if c.resSession != "" {
		ids = append(ids, c.resSession)
	}
	c.resMu.Unlock()
	for _, id := range ids {
		if _, err := c.s.svc.CloseSession(ctx, c.caller, api.SessionParams{SessionID: id}); err != nil {
			c.s.log.Debug("closing session", "session", id, "error", err)
		}
	}
}

// instructionsMiddleware puts the session's current instructions (the
// loading rule and the <available_skills> catalog, as
// sessions.instructions renders them) into initialize and server/discover.
func (c *Conn) instructionsMiddleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		if err != nil {
			return res, err
		}
		switch r := res.(type) {
		case *sdk.InitializeResult:
			r.Instructions = c.instructions(ctx)
		case *sdk.DiscoverResult:
			r.Instructions = c.instructions(ctx)
		}
		return res, nil
	}
}

func (c *Conn) instructions(ctx context.Context) string {
	res, err := c.s.svc.Instructions(ctx, c.caller, api.SessionParams{SessionID: c.session})
	if err != nil {
		c.s.log.Warn("rendering instructions failed", "error", err)
		return "skillbox runs Agent Skills in sandboxes; call skills_list to see the skills (the catalog could not be rendered: " + serviceText(err, api.Sentinel(api.KindOf(err))) + ")"
	}
	return res.Instructions + mcpToolNames
}

// mcpToolNames maps the method names the instructions use to this server's
// tools.
const mcpToolNames = "\n\nOver this MCP server, skills.load is the tool " + ToolLoad + ", skills.read is " + ToolRead +
	", skills.run_script is " + ToolRunScript + " and skills.run_code is " + ToolRunCode +
	"; each skill is also a prompt, and its files are resources under skill://<skill>/."

// poll refreshes the catalog until ctx ends.
func (c *Conn) poll(ctx context.Context) {
	if c.s.opts.PollInterval < 0 {
		return
	}
	t := time.NewTicker(c.s.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.refresh(ctx); err != nil && ctx.Err() == nil {
				c.s.log.Debug("refreshing skills", "error", err)
			}
		}
	}
}

// refresh lists the skills and, when they changed, re-registers prompts and
// SKILL.md resources and the catalog-bearing tool; the SDK sends the
// list-changed notifications for each.
func (c *Conn) refresh(ctx context.Context) error {
	list, err := c.s.svc.ListSkills(ctx, c.caller, api.ListSkillsParams{SessionID: c.session})
	if err != nil {
		return err
	}
	key := catalogKey(list)
	c.mu.Lock()
	defer c.mu.Unlock()
	if key == c.catalogKey && c.catalog != nil {
		return nil
	}
	c.catalog, c.catalogKey = list, key
	c.syncPrompts(list)
	c.syncSkillResources(list)
	c.addLoadTool(list)
	return nil
}

func catalogKey(list []api.SkillInfo) string {
	var b strings.Builder
	for _, s := range list {
		fmt.Fprintf(&b, "%s\x00%s\x00%s\x00%t\x00%t\x00%s\n", s.Name, s.Digest, s.Description, s.ModelInvocable, s.UserInvocable, s.Location)
	}
	return b.String()
}

// skillsSnapshot returns the last catalog seen.
func (c *Conn) skillsSnapshot() []api.SkillInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.catalog)
}

// toolError turns a service error into the text of a tool error: its kind
// (what to branch on), the service's message (what to do next) and the
// error data (confirmation id, limits, ...).
func toolError(err error) error {
	kind := api.KindOf(err)
	msg := kind + ": " + serviceText(err, api.Sentinel(kind))
	if data := api.ErrorData(err); len(data) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(data)) {
			parts = append(parts, fmt.Sprintf("%s=%v", k, data[k]))
		}
		msg += " (" + strings.Join(parts, ", ") + ")"
	}
	return errors.New(msg)
}

// serviceText is err's text as the service wrote it, without the words of
// its kind (which toolError shows its own way): an error of a daemon
// (through the bridge, *api.Error) gives its detail from the wire.
func serviceText(err error, kind error) string {
	if we, ok := err.(*api.Error); ok {
		if we.Detail != "" {
			return we.Detail
		}
		return we.Message
	}
	return errkind.Detail(err, kind)
}
