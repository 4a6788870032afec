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

	"github.com/skillbox/skillbox/sandbox"
	"github.com/skillbox/skillbox/sandbox/client"
)

// serve runs a real sandbox.Server on a socket in a temp dir.
func serve(t *testing.T, opts sandbox.ServerOptions, register func(*sandbox.Server)) (string, *sandbox.Server) {
	t.Helper()
	s := sandbox.NewServer(opts)
	register(s)
	path := filepath.Join(t.TempDir(), "c.sock")
	ln, err := sandbox.Listen(path, 0o600, "")
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
func bind[T any](s *sandbox.Server, method string, check func(T) (any, error)) {
	s.Handle(method, func(ctx context.Context, call *sandbox.Call) (any, error) {
		var p T
		if err := call.Bind(&p); err != nil {
			return nil, err
		}
		return check(p)
	})
}

func TestTypedMethodsRoundTrip(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	conf := client.Confirmation{ID: "cnf_1", SessionID: "ses_1", Digest: "sha256:d", Reason: "network", Rule: "f.hcl:3",
		State: client.ConfirmationApproved, Created: now, Expires: now.Add(time.Hour), RequestedBy: 1000,
		DecidedBy: &client.Peer{UID: 0, PID: 1, Process: "skillbox"}}
	var gotRun client.RunScriptParams
	path, _ := serve(t, sandbox.ServerOptions{}, func(s *sandbox.Server) {
		bind(s, client.MethodSessionsCreate, func(struct{}) (any, error) {
			return client.CreateSessionResult{SessionID: "ses_1"}, nil
		})
		bind(s, client.MethodSessionsClose, func(p client.SessionParams) (any, error) {
			if p.SessionID != "ses_1" {
				return nil, fmt.Errorf("session %q: %w", p.SessionID, sandbox.ErrNotFound)
			}
			return client.CloseSessionResult{Closed: true}, nil
		})
		bind(s, client.MethodSessionsInstructions, func(p client.SessionParams) (any, error) {
			return client.InstructionsResult{Instructions: "use skills", AvailableSkills: "<available_skills/>"}, nil
		})
		bind(s, client.MethodSkillsList, func(p client.ListSkillsParams) (any, error) {
			// The daemon answers with a bare array; the object of earlier
			// daemons ({"skills": [...]}) is still read (query "legacy").
			list := []client.SkillInfo{{Name: "pdf", Description: "PDFs", Digest: "sha256:a", Tags: []string{"docs"}, ModelInvocable: true}}
			if p.Query == "legacy" {
				return map[string]any{"skills": list}, nil
			}
			if p.Query == "none" {
				return []client.SkillInfo{}, nil
			}
			return list, nil
		})
		bind(s, client.MethodSkillsLoad, func(p client.LoadParams) (any, error) {
			return client.LoadResult{ActiveSkills: []client.ActiveSkill{{Name: p.Names[0], RootDir: "/s/" + p.Names[0], Digest: "sha256:a",
				Properties: map[string]any{"license": "MIT"}}}, Hints: []string{"mode=" + p.Mode}}, nil
		})
		bind(s, client.MethodSkillsUnload, func(p client.UnloadParams) (any, error) {
			if !p.All {
				return nil, fmt.Errorf("want all: %w", sandbox.ErrInvalidParams)
			}
			return client.LoadResult{ActiveSkills: []client.ActiveSkill{}}, nil
		})
		bind(s, client.MethodSkillsRead, func(p client.ReadParams) (any, error) {
			return client.ReadResult{Skill: "pdf", Path: p.Path, Size: 5, Encoding: "utf-8", Content: "hello"}, nil
		})
		bind(s, client.MethodSkillsRunScript, func(p client.RunScriptParams) (any, error) {
			gotRun = p
			return client.RunScriptResult{RunID: "run_1", Path: p.Path, ExitCode: 3, Stdout: "out", Reason: client.ReasonExit, DurationMS: 12,
				Outputs: []client.Output{{Path: "outputs/r.txt", Size: 2, SHA256: "x", Content: "b2s="}}}, nil
		})
		bind(s, client.MethodToolsCheck, func(p client.CheckToolParams) (any, error) {
			return client.CheckToolResult{Decision: client.DecisionDeny, Rule: "skill pdf allowed-tools", Reason: string(p.Input)}, nil
		})
		bind(s, client.MethodConfirmationsList, func(p client.ListConfirmationsParams) (any, error) {
			return []client.Confirmation{conf}, nil
		})
		bind(s, client.MethodConfirmationsApprove, func(p client.ConfirmationIDParams) (any, error) {
			c := conf
			c.ID = p.ID
			return c, nil
		})
		bind(s, client.MethodConfirmationsDeny, func(p client.ConfirmationIDParams) (any, error) {
			c := conf
			c.State = client.ConfirmationDenied
			return c, nil
		})
	})
	c := dial(t, path)
	ctx := context.Background()

	id, err := c.CreateSession(ctx)
	if err != nil || id != "ses_1" {
		t.Fatalf("CreateSession = %q, %v", id, err)
	}
	ins, err := c.Instructions(ctx, id)
	if err != nil || ins.Instructions != "use skills" {
		t.Fatalf("Instructions = %+v, %v", ins, err)
	}
	for _, q := range []string{"pdf", "legacy"} {
		sk, err := c.ListSkills(ctx, client.ListSkillsParams{Query: q})
		if err != nil || len(sk) != 1 || sk[0].Name != "pdf" || !sk[0].ModelInvocable || len(sk[0].Tags) != 1 {
			t.Fatalf("ListSkills(%s) = %+v, %v", q, sk, err)
		}
	}
	if sk, err := c.ListSkills(ctx, client.ListSkillsParams{Query: "none"}); err != nil || sk == nil || len(sk) != 0 {
		t.Fatalf("ListSkills(none) = %#v, %v; want an empty, non-nil list", sk, err)
	}
	var raw json.RawMessage
	if err := c.Call(ctx, client.MethodSkillsList, client.ListSkillsParams{}, &raw); err != nil || !strings.HasPrefix(string(raw), "[") {
		t.Fatalf("skills.list on the wire = %s, %v; want a bare array", raw, err)
	}
	lr, err := c.Load(ctx, client.LoadParams{SessionID: id, Names: []string{"pdf"}, Mode: client.LoadAdd})
	if err != nil || lr.ActiveSkills[0].RootDir != "/s/pdf" || lr.Hints[0] != "mode=add" || lr.ActiveSkills[0].Properties["license"] != "MIT" {
		t.Fatalf("Load = %+v, %v", lr, err)
	}
	if lr, err := c.Unload(ctx, client.UnloadParams{SessionID: id, All: true}); err != nil || len(lr.ActiveSkills) != 0 {
		t.Fatalf("Unload = %+v, %v", lr, err)
	}
	rr, err := c.Read(ctx, client.ReadParams{SessionID: id, Path: "SKILL.md", Offset: 1, Length: 2})
	if err != nil || rr.Content != "hello" || rr.Path != "SKILL.md" {
		t.Fatalf("Read = %+v, %v", rr, err)
	}
	want := client.RunScriptParams{SessionID: id, Skill: "pdf", Path: "scripts/x.py", Args: []string{"a", "b c"},
		Env: map[string]string{"K": "V"}, Stdin: "in", TimeoutMS: 5000, Files: []client.File{client.NewFile("in.bin", []byte{0, 1, 2})},
		Network: true, ConfirmationID: "cnf_1"}
	res, err := c.RunScript(ctx, want)
	if err != nil || res.ExitCode != 3 || res.RunID != "run_1" || res.Reason != "exit" {
		t.Fatalf("RunScript = %+v, %v", res, err)
	}
	if !reflect.DeepEqual(gotRun, want) {
		t.Fatalf("server saw %+v, want %+v", gotRun, want)
	}
	if data, err := res.Outputs[0].Data(); err != nil || string(data) != "ok" {
		t.Fatalf("output data %q, %v", data, err)
	}
	ct, err := c.CheckTool(ctx, client.CheckToolParams{SessionID: id, Tool: "Bash", Input: json.RawMessage(`{"command":"ls"}`)})
	if err != nil || ct.Decision != "deny" || ct.Reason != `{"command":"ls"}` {
		t.Fatalf("CheckTool = %+v, %v", ct, err)
	}
	cl, err := c.ListConfirmations(ctx, client.ListConfirmationsParams{State: "pending"})
	if err != nil || len(cl) != 1 || !cl[0].Created.Equal(now) || cl[0].DecidedBy.Process != "skillbox" {
		t.Fatalf("ListConfirmations = %+v, %v", cl, err)
	}
	if a, err := c.Approve(ctx, "cnf_9"); err != nil || a.ID != "cnf_9" {
		t.Fatalf("Approve = %+v, %v", a, err)
	}
	if d, err := c.Deny(ctx, "cnf_9"); err != nil || d.State != "denied" {
		t.Fatalf("Deny = %+v, %v", d, err)
	}
	if err := c.CloseSession(ctx, id); err != nil {
		t.Fatal(err)
	}
	err = c.CloseSession(ctx, "ses_other")
	if !client.IsKind(err, client.KindNotFound) {
		t.Fatalf("CloseSession(other) = %v", err)
	}
}

// The wire structs of the server side (sandbox.Confirmation, sandbox.Peer)
// encode to what the client decodes.
func TestServerTypesMatchClient(t *testing.T) {
	now := time.Now().UTC().Round(0)
	sc := sandbox.Confirmation{ID: "cnf_1", SessionID: "ses_1", Digest: "d", Reason: "r", Rule: "x", State: sandbox.ConfirmationUsed,
		Created: now, Expires: now, RequestedBy: 5, DecidedBy: &sandbox.Peer{UID: 1, GID: 2, PID: 3, Process: "p"}, DecidedAt: &now, UsedAt: &now,
		Details: map[string]string{"a": "b"}}
	b, _ := json.Marshal(sc)
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var cc client.Confirmation
	if err := dec.Decode(&cc); err != nil {
		t.Fatalf("client cannot decode sandbox.Confirmation: %v", err)
	}
	back, _ := json.Marshal(cc)
	if string(back) != string(b) {
		t.Fatalf("round trip differs:\n%s\n%s", b, back)
	}
}

func TestErrorsAndConfirmationData(t *testing.T) {
	path, _ := serve(t, sandbox.ServerOptions{}, func(s *sandbox.Server) {
		s.Handle(client.MethodSkillsRunScript, func(ctx context.Context, call *sandbox.Call) (any, error) {
			return nil, &sandbox.ConfirmationRequiredError{ID: "cnf_7", Reason: "network", Rule: "f.hcl:9", Digest: "sha256:z"}
		})
	})
	c := dial(t, path)
	_, err := c.RunScript(context.Background(), client.RunScriptParams{SessionID: "s", Path: "scripts/a.sh"})
	var e *client.Error
	if !errors.As(err, &e) || e.Kind != client.KindConfirmationRequired || e.Code != sandbox.CodeConfirmationRequired {
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
	if !errors.As(err, &e) || e.Code != sandbox.CodeMethodNotFound || !strings.Contains(e.Message, "skills.run_script") {
		t.Fatalf("unknown method: %v", err)
	}
}

func TestConcurrentCallsOneClient(t *testing.T) {
	path, _ := serve(t, sandbox.ServerOptions{}, func(s *sandbox.Server) {
		s.Handle("sleep", func(ctx context.Context, call *sandbox.Call) (any, error) {
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
	path, _ := serve(t, sandbox.ServerOptions{}, func(s *sandbox.Server) {
		s.Handle("block", func(ctx context.Context, call *sandbox.Call) (any, error) {
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil, ctx.Err()
		})
		s.Handle("echo", func(ctx context.Context, call *sandbox.Call) (any, error) { return call.Params, nil })
	})
	c := dial(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Call(ctx, "block", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call = %v", err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, sandbox.ErrCallCancelled) {
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
	path, _ := serve(t, sandbox.ServerOptions{IdleTimeout: 100 * time.Millisecond}, func(s *sandbox.Server) {
		s.Handle("echo", func(ctx context.Context, call *sandbox.Call) (any, error) { return 1, nil })
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
	path, _ := serve(t, sandbox.ServerOptions{MaxLineBytes: 4096}, func(s *sandbox.Server) {
		s.Handle("echo", func(ctx context.Context, call *sandbox.Call) (any, error) { return 1, nil })
	})
	c := dial(t, path)
	err := c.Call(context.Background(), "echo", map[string]string{"x": strings.Repeat("a", 100_000)}, nil)
	if !client.IsKind(err, client.KindLimitExceeded) {
		t.Fatalf("over-long request: %v", err)
	}
	if err := c.Call(context.Background(), "echo", nil, nil); err != nil {
		t.Fatalf("after an over-long request: %v", err)
	}
}

func TestRefusedConnectionSaysWhy(t *testing.T) {
	path, _ := serve(t, sandbox.ServerOptions{Authorize: func(p sandbox.Peer) error {
		return fmt.Errorf("uid %d is not allowed", p.UID)
	}}, func(s *sandbox.Server) {
		s.Handle("echo", func(ctx context.Context, call *sandbox.Call) (any, error) { return 1, nil })
	})
	c := dial(t, path)
	err := c.Call(context.Background(), "echo", nil, nil)
	if !client.IsKind(err, client.KindDenied) || !strings.Contains(err.Error(), "not allowed") {
		t.Fatalf("refused connection: %v", err)
	}
}

func TestDialFailure(t *testing.T) {
	_, err := client.Dial(context.Background(), filepath.Join(t.TempDir(), "none.sock"))
	if err == nil || !strings.Contains(err.Error(), "skillbox serve") {
		t.Fatalf("Dial = %v", err)
	}
}
