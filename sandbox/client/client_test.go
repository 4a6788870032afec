package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/outcome"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
	"github.com/skillbox/skillbox/sandbox/doors/jsonrpc"
	"github.com/skillbox/skillbox/sandbox/doors/sockfile"
)

// serve runs a real jsonrpc.Server on a socket in a temp dir.
func serve(t *testing.T, opts jsonrpc.ServerOptions, register func(*jsonrpc.Server)) (string, *jsonrpc.Server) {
	t.Helper()
	s := jsonrpc.NewServer(opts)
	register(s)
	path := filepath.Join(t.TempDir(), "c.sock")
	ln, err := sockfile.Listen(path, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(context.Background(), ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return path, s
}

func dial(t *testing.T, path string) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// bind decodes params strictly into T and returns result, so a field name
// that differs between client and server fails the test.
func bind[T any](s *jsonrpc.Server, method string, check func(T) (any, error)) {
	s.Handle(method, func(ctx context.Context, call *jsonrpc.Call) (any, error) {
		var p T
		if err := call.Bind(&p); err != nil {
			return nil, err
		}
		return check(p)
	})
}

func TestTypedMethodsRoundTrip(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	conf := api.Confirmation{ID: "cnf_1", SessionID: "ses_1", Digest: "sha256:d", Reason: "network", Rule: "f.hcl:3",
		State: api.ConfirmationApproved, Created: now, Expires: now.Add(time.Hour), RequestedBy: 1000,
		DecidedBy: &api.Peer{UID: 0, PID: 1, Process: "skillbox"}}
	var gotRun api.RunScriptParams
	path, _ := serve(t, jsonrpc.ServerOptions{}, func(s *jsonrpc.Server) {
		bind(s, api.MethodSessionsCreate, func(struct{}) (any, error) {
			return api.CreateSessionResult{SessionID: "ses_1"}, nil
		})
		bind(s, api.MethodSessionsClose, func(p api.SessionParams) (any, error) {
			if p.SessionID != "ses_1" {
				return nil, fmt.Errorf("session %q: %w", p.SessionID, api.ErrNotFound)
			}
			return api.CloseSessionResult{Closed: true}, nil
		})
		bind(s, api.MethodSessionsInstructions, func(p api.SessionParams) (any, error) {
			return api.InstructionsResult{Instructions: "use skills", AvailableSkills: "<available_skills/>"}, nil
		})
		bind(s, api.MethodSkillsList, func(p api.ListSkillsParams) (any, error) {
			// The daemon answers with a bare array; the object of earlier
			// daemons ({"skills": [...]}) is still read (query "legacy").
			list := []api.SkillInfo{{Name: "pdf", Description: "PDFs", Digest: "sha256:a", Tags: []string{"docs"}, ModelInvocable: true}}
			if p.Query == "legacy" {
				return map[string]any{"skills": list}, nil
			}
			if p.Query == "none" {
				return []api.SkillInfo{}, nil
			}
			return list, nil
		})
		bind(s, api.MethodSkillsLoad, func(p api.LoadParams) (any, error) {
			return api.LoadResult{ActiveSkills: []api.ActiveSkill{{Name: p.Names[0], RootDir: "/s/" + p.Names[0], Digest: "sha256:a",
				Properties: map[string]any{"license": "MIT"}}}, Hints: []string{"mode=" + p.Mode}}, nil
		})
		bind(s, api.MethodSkillsUnload, func(p api.UnloadParams) (any, error) {
			if !p.All {
				return nil, fmt.Errorf("want all: %w", api.ErrInvalidParams)
			}
			return api.LoadResult{ActiveSkills: []api.ActiveSkill{}}, nil
		})
		bind(s, api.MethodSkillsRead, func(p api.ReadParams) (any, error) {
			return api.ReadResult{Skill: "pdf", Path: p.Path, Size: 5, Encoding: "utf-8", Content: "hello"}, nil
		})
		bind(s, api.MethodSkillsRunScript, func(p api.RunScriptParams) (any, error) {
			gotRun = p
			return api.RunScriptResult{
				RunID:      "run_1",
				Path:       p.Path,
				Stdout:     "out",
				DurationMS: 12,
				Outputs:    []api.Output{{Path: "outputs/r.txt", Size: 2, SHA256: "x", Content: "b2s="}},
				Summary:    outcome.Summary{ExitCode: 3, Reason: runtime.ReasonExit},
			}, nil
		})
		bind(s, api.MethodToolsCheck, func(p api.CheckToolParams) (any, error) {
			return api.CheckToolResult{Decision: api.DecisionDeny, Rule: "skill pdf allowed-tools", Reason: string(p.Input)}, nil
		})
		bind(s, api.MethodConfirmationsList, func(p api.ListConfirmationsParams) (any, error) {
			return []api.Confirmation{conf}, nil
		})
		bind(s, api.MethodConfirmationsApprove, func(p api.ConfirmationIDParams) (any, error) {
			c := conf
			c.ID = p.ID
			return c, nil
		})
		bind(s, api.MethodConfirmationsDeny, func(p api.ConfirmationIDParams) (any, error) {
			c := conf
			c.State = api.ConfirmationDenied
			return c, nil
		})
	})
	c := dial(t, path)
	ctx := context.Background()

	id, err := c.NewSession(ctx)
	if err != nil || id != "ses_1" {
		t.Fatalf("CreateSession = %q, %v", id, err)
	}
	ins, err := c.Instructions(ctx, api.Peer{}, api.SessionParams{SessionID: id})
	if err != nil || ins.Instructions != "use skills" {
		t.Fatalf("Instructions = %+v, %v", ins, err)
	}
	for _, q := range []string{"pdf", "legacy"} {
		sk, err := c.ListSkills(ctx, api.Peer{}, api.ListSkillsParams{Query: q})
		if err != nil || len(sk) != 1 || sk[0].Name != "pdf" || !sk[0].ModelInvocable || len(sk[0].Tags) != 1 {
			t.Fatalf("ListSkills(%s) = %+v, %v", q, sk, err)
		}
	}
	if sk, err := c.ListSkills(ctx, api.Peer{}, api.ListSkillsParams{Query: "none"}); err != nil || sk == nil || len(sk) != 0 {
		t.Fatalf("ListSkills(none) = %#v, %v; want an empty, non-nil list", sk, err)
	}
	var raw json.RawMessage
	if err := c.Call(ctx, api.MethodSkillsList, api.ListSkillsParams{}, &raw); err != nil || !strings.HasPrefix(string(raw), "[") {
		t.Fatalf("skills.list on the wire = %s, %v; want a bare array", raw, err)
	}
	lr, err := c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: id, Names: []string{"pdf"}, Mode: api.LoadAdd})
	if err != nil || lr.ActiveSkills[0].RootDir != "/s/pdf" || lr.Hints[0] != "mode=add" || lr.ActiveSkills[0].Properties["license"] != "MIT" {
		t.Fatalf("Load = %+v, %v", lr, err)
	}
	if lr, err := c.UnloadSkills(ctx, api.Peer{}, api.UnloadParams{SessionID: id, All: true}); err != nil || len(lr.ActiveSkills) != 0 {
		t.Fatalf("Unload = %+v, %v", lr, err)
	}
	rr, err := c.ReadSkillFile(ctx, api.Peer{}, api.ReadParams{SessionID: id, Path: "SKILL.md", Offset: 1, Length: 2})
	if err != nil || rr.Content != "hello" || rr.Path != "SKILL.md" {
		t.Fatalf("Read = %+v, %v", rr, err)
	}
	want := api.RunScriptParams{
		RunInputs: api.RunInputs{SessionID: id, Args: []string{"a", "b c"}, Env: map[string]string{"K": "V"}, Stdin: "in", TimeoutMS: 5000, Files: []api.File{api.NewFile("in.bin", []byte{0, 1, 2})}, ConfirmationID: "cnf_1"},
		Skill:     "pdf",
		Path:      "scripts/x.py",
		Network:   true,
	}
	res, err := c.RunScript(ctx, api.Peer{}, want)
	if err != nil || res.ExitCode != 3 || res.RunID != "run_1" || res.Reason != "exit" {
		t.Fatalf("RunScript = %+v, %v", res, err)
	}
	if !reflect.DeepEqual(gotRun, want) {
		t.Fatalf("server saw %+v, want %+v", gotRun, want)
	}
	if data, err := res.Outputs[0].Data(); err != nil || string(data) != "ok" {
		t.Fatalf("output data %q, %v", data, err)
	}
	ct, err := c.CheckTool(ctx, api.Peer{}, api.CheckToolParams{SessionID: id, Tool: "Bash", Input: json.RawMessage(`{"command":"ls"}`)})
	if err != nil || ct.Decision != "deny" || ct.Reason != `{"command":"ls"}` {
		t.Fatalf("CheckTool = %+v, %v", ct, err)
	}
	confs, err := c.ListConfirmations(ctx, api.Peer{}, api.ListConfirmationsParams{State: "pending"})
	if err != nil {
		t.Fatal(err)
	}
	cl := confs.Confirmations
	if len(cl) != 1 || !cl[0].Created.Equal(now) || cl[0].DecidedBy.Process != "skillbox" {
		t.Fatalf("ListConfirmations = %+v, %v", cl, err)
	}
	if a, err := c.ApproveConfirmation(ctx, api.Peer{}, api.ConfirmationIDParams{ID: "cnf_9"}); err != nil || a.ID != "cnf_9" {
		t.Fatalf("Approve = %+v, %v", a, err)
	}
	if d, err := c.DenyConfirmation(ctx, api.Peer{}, api.ConfirmationIDParams{ID: "cnf_9"}); err != nil || d.State != "denied" {
		t.Fatalf("Deny = %+v, %v", d, err)
	}
	if _, err := c.CloseSession(ctx, api.Peer{}, api.SessionParams{SessionID: id}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CloseSession(ctx, api.Peer{}, api.SessionParams{SessionID: "ses_other"})
	if !client.IsKind(err, api.KindNotFound) {
		t.Fatalf("CloseSession(other) = %v", err)
	}
}

// The wire structs of the server side (api.Confirmation, api.Peer)
// encode to what the client decodes.
func TestServerTypesMatchClient(t *testing.T) {
	now := time.Now().UTC().Round(0)
	sc := api.Confirmation{ID: "cnf_1", SessionID: "ses_1", Digest: "d", Reason: "r", Rule: "x", State: api.ConfirmationUsed,
		Created: now, Expires: now, RequestedBy: 5, DecidedBy: &api.Peer{UID: 1, GID: 2, PID: 3, Process: "p"}, DecidedAt: &now, UsedAt: &now,
		Details: map[string]string{"a": "b"}}
	b, _ := json.Marshal(sc)
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var cc api.Confirmation
	if err := dec.Decode(&cc); err != nil {
		t.Fatalf("client cannot decode api.Confirmation: %v", err)
	}
	back, _ := json.Marshal(cc)
	if string(back) != string(b) {
		t.Fatalf("round trip differs:\n%s\n%s", b, back)
	}
}

func TestErrorsAndConfirmationData(t *testing.T) {
	path, _ := serve(t, jsonrpc.ServerOptions{}, func(s *jsonrpc.Server) {
		s.Handle(api.MethodSkillsRunScript, func(ctx context.Context, call *jsonrpc.Call) (any, error) {
			return nil, &api.ConfirmationRequiredError{ID: "cnf_7", Reason: "network", Rule: "f.hcl:9", Digest: "sha256:z"}
		})
	})
	c := dial(t, path)
	_, err := c.RunScript(context.Background(), api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: "s"}, Path: "scripts/a.sh"})
	var e *client.Error
	if !errors.As(err, &e) || e.Kind != api.KindConfirmationRequired || e.Code != jsonrpc.CodeConfirmationRequired {
		t.Fatalf("err = %#v", err)
	}
	cr, ok := e.ConfirmationRequired()
	if !ok || cr.ConfirmationID != "cnf_7" || cr.Rule != "f.hcl:9" || cr.Digest != "sha256:z" {
		t.Fatalf("ConfirmationRequired = %+v, %v", cr, ok)
	}
	if _, ok := e.Data["kind"]; ok {
		t.Error("kind left in Data")
	}
	err = c.Call(context.Background(), "skills.lst", nil, nil)
	if !errors.As(err, &e) || e.Code != jsonrpc.CodeMethodNotFound || !strings.Contains(e.Message, "skills.run_script") {
		t.Fatalf("unknown method: %v", err)
	}
}

func TestConcurrentCallsOneClient(t *testing.T) {
	path, _ := serve(t, jsonrpc.ServerOptions{}, func(s *jsonrpc.Server) {
		s.Handle("sleep", func(ctx context.Context, call *jsonrpc.Call) (any, error) {
			var p struct{ MS, N int }
			if err := json.Unmarshal(call.Params, &p); err != nil {
				return nil, err
			}
			time.Sleep(time.Duration(p.MS) * time.Millisecond)
			return p.N, nil
		})
	})
	c := dial(t, path)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int
			if err := c.Call(context.Background(), "sleep", map[string]int{"MS": (i * 13) % 40, "N": i}, &n); err != nil {
				errs <- err
				return
			}
			if n != i {
				errs <- fmt.Errorf("call %d got the answer of %d", i, n)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestContextCancelCancelsServerCall(t *testing.T) {
	cause := make(chan error, 1)
	path, _ := serve(t, jsonrpc.ServerOptions{}, func(s *jsonrpc.Server) {
		s.Handle("block", func(ctx context.Context, call *jsonrpc.Call) (any, error) {
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil, ctx.Err()
		})
		s.Handle("echo", func(ctx context.Context, call *jsonrpc.Call) (any, error) { return call.Params, nil })
	})
	c := dial(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Call(ctx, "block", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call = %v", err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, jsonrpc.ErrCallCancelled) {
			t.Fatalf("server-side cause %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("server call not cancelled")
	}
	// The connection is still good.
	var out map[string]int
	if err := c.Call(context.Background(), "echo", map[string]int{"a": 1}, &out); err != nil || out["a"] != 1 {
		t.Fatalf("after cancel: %v %v", out, err)
	}
}

func TestReconnectAfterIdleClose(t *testing.T) {
	path, _ := serve(t, jsonrpc.ServerOptions{IdleTimeout: 100 * time.Millisecond}, func(s *jsonrpc.Server) {
		s.Handle("echo", func(ctx context.Context, call *jsonrpc.Call) (any, error) { return 1, nil })
	})
	c := dial(t, path)
	if err := c.Call(context.Background(), "echo", nil, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // the daemon drops the idle connection
	if err := c.Call(context.Background(), "echo", nil, nil); err != nil {
		t.Fatalf("call after the daemon dropped the connection: %v", err)
	}
	c.Close()
	if err := c.Call(context.Background(), "echo", nil, nil); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestOverlongRequestAnsweredByID(t *testing.T) {
	path, _ := serve(t, jsonrpc.ServerOptions{MaxLineBytes: 4096}, func(s *jsonrpc.Server) {
		s.Handle("echo", func(ctx context.Context, call *jsonrpc.Call) (any, error) { return 1, nil })
	})
	c := dial(t, path)
	err := c.Call(context.Background(), "echo", map[string]string{"x": strings.Repeat("a", 100_000)}, nil)
	if !client.IsKind(err, api.KindLimitExceeded) {
		t.Fatalf("over-long request: %v", err)
	}
	if err := c.Call(context.Background(), "echo", nil, nil); err != nil {
		t.Fatalf("after an over-long request: %v", err)
	}
}

func TestRefusedConnectionSaysWhy(t *testing.T) {
	path, _ := serve(t, jsonrpc.ServerOptions{Authorize: func(p api.Peer) error {
		return fmt.Errorf("uid %d is not allowed", p.UID)
	}}, func(s *jsonrpc.Server) {
		s.Handle("echo", func(ctx context.Context, call *jsonrpc.Call) (any, error) { return 1, nil })
	})
	c := dial(t, path)
	err := c.Call(context.Background(), "echo", nil, nil)
	if !client.IsKind(err, api.KindDenied) || !strings.Contains(err.Error(), "not allowed") {
		t.Fatalf("refused connection: %v", err)
	}
}

func TestDialFailure(t *testing.T) {
	_, err := client.Dial(context.Background(), filepath.Join(t.TempDir(), "none.sock"))
	if err == nil || !strings.Contains(err.Error(), "skillbox serve") {
		t.Fatalf("Dial = %v", err)
	}
}
