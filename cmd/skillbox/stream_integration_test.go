//go:build integration

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/runtime/waitfor"
	"github.com/skillbox/skillbox/sandbox/api"
	"github.com/skillbox/skillbox/sandbox/client"
)

// tickerScript prints a line every 100 ms, for 60 lines.
const tickerScript = "i=1\nwhile [ $i -le 60 ]; do echo \"tick $i\"; i=$((i+1)); sleep 0.1; done\n"

// floodScript writes about 900 KiB of output as fast as it can.
const floodScript = "i=0\nwhile [ $i -lt 900 ]; do printf '%01023d\\n' $i; i=$((i+1)); done\n"

// events collects a client's notifications, and whether the call's result
// had arrived when each came.
type events struct {
	mu     sync.Mutex
	got    []api.Event
	first  chan string // run id of the first run.output
	once   sync.Once
	result bool // set once the result is in
	late   []string
}

func newEvents() *events { return &events{first: make(chan string, 1)} }

func (e *events) handle(n client.Notification) {
	ev, err := n.Event()
	if err != nil {
		return
	}
	e.mu.Lock()
	e.got = append(e.got, ev)
	if e.result {
		e.late = append(e.late, n.Method)
	}
	e.mu.Unlock()
	if o, ok := ev.(*api.RunOutputEvent); ok {
		e.once.Do(func() { e.first <- o.RunID })
	}
}

func (e *events) done() {
	e.mu.Lock()
	e.result = true
	e.mu.Unlock()
}

func (e *events) list() []api.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]api.Event(nil), e.got...)
}

// tickerDaemon serves the ticker skill and returns a client with a session
// that has it loaded, and the client's notifications.
func tickerDaemon(t *testing.T) (*itDaemon, *client.Client, *events, string) {
	needDaemon(t)
	d := newItDaemon(t, extraSkill(t, "ticker", "scripts/tick.sh", tickerScript))
	d.start()
	c := d.client()
	ev := newEvents()
	c.OnNotification(ev.handle)
	ctx := ctxT(t)
	sid := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid, Names: []string{"ticker"}}))
	return d, c, ev, sid
}

// The lines of a running script reach the client as run.output
// notifications before run.exited and before the result, in order, and the
// result still carries the whole output.
func TestDaemonStreamsRunOutput(t *testing.T) {
	_, c, ev, sid := tickerDaemon(t)
	ctx := ctxT(t)

	res, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Stream: true}, Path: "scripts/tick.sh"})
	ev.done()
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != runtime.ReasonExit || res.ExitCode != 0 || !strings.Contains(res.Stdout, "tick 60\n") {
		t.Fatalf("result: %+v", res)
	}
	got := ev.list()
	if len(got) < 3 {
		t.Fatalf("%d events: %+v", len(got), got)
	}
	if s, ok := got[0].(*api.RunStartedEvent); !ok || s.RunID != res.RunID || s.Skill != "ticker" || s.Path != "scripts/tick.sh" {
		t.Errorf("first event %+v, want run.started of %s", got[0], res.RunID)
	}
	if x, ok := got[len(got)-1].(*api.RunExitedEvent); !ok || x.RunID != res.RunID || x.Reason != string(runtime.ReasonExit) || x.ExitCode != 0 {
		t.Errorf("last event %+v, want run.exited", got[len(got)-1])
	}
	var streamed strings.Builder
	var seq uint64
	outputs := 0
	for _, e := range got[1 : len(got)-1] {
		o, ok := e.(*api.RunOutputEvent)
		if !ok {
			t.Fatalf("event %+v between run.started and run.exited", e)
		}
		if o.RunID != res.RunID || o.Stream != api.StreamStdout || o.Seq != seq+1 {
			t.Errorf("run.output %+v after seq %d", o, seq)
		}
		seq = o.Seq
		outputs++
		streamed.WriteString(o.Data)
	}
	if streamed.String() != res.Stdout {
		t.Errorf("streamed output differs from the result's:\n%q\n%q", streamed.String(), res.Stdout)
	}
	// A line every 100 ms cannot all come in one chunk: the lines were
	// delivered while the script ran.
	if outputs < 2 {
		t.Errorf("%d run.output events for 60 lines over 6 seconds", outputs)
	}
	if len(ev.late) > 0 {
		t.Errorf("notifications after the result: %v", ev.late)
	}
}

// runs.cancel stops a streaming run: the run's own call returns with
// reason "cancelled"; only the run's uid may cancel it.
func TestDaemonCancelRun(t *testing.T) {
	d, c, ev, sid := tickerDaemon(t)
	ctx := ctxT(t)

	type answer struct {
		res *api.RunScriptResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid, Stream: true}, Path: "scripts/tick.sh"})
		done <- answer{res, err}
	}()
	var runID string
	select {
	case runID = <-ev.first:
	case a := <-done:
		t.Fatalf("the run ended before any output: %+v %v", a.res, a.err)
	}
	_, err := c.CancelRun(ctx, api.Peer{}, api.CancelRunParams{RunID: "run_" + strings.Repeat("0", 32)})
	wantKind(t, "cancel of an unknown run", err, api.KindNotFound)

	// Another connection of the same uid may cancel it.
	other := d.client()
	cr, err := other.CancelRun(ctx, api.Peer{}, api.CancelRunParams{RunID: runID})
	if err != nil || !cr.Cancelled || cr.RunID != runID {
		t.Fatalf("runs.cancel: %+v %v", cr, err)
	}
	a := <-done
	if a.err != nil {
		t.Fatalf("cancelled run: %v", a.err)
	}
	if a.res.Reason != runtime.ReasonCancelled || a.res.RunID != runID || strings.Contains(a.res.Stdout, "tick 60") {
		t.Fatalf("cancelled run's result: %+v", a.res)
	}
	got := ev.list()
	if x, ok := got[len(got)-1].(*api.RunExitedEvent); !ok || x.Reason != string(runtime.ReasonCancelled) {
		t.Errorf("last event %+v, want run.exited with reason cancelled", got[len(got)-1])
	}
	if ids := d.containers(); len(ids) != 0 {
		t.Errorf("sandboxes left after cancel: %v", ids)
	}
	var ends int
	for _, r := range d.records() {
		if r.Event == "run.end" && r.Run != nil && r.Run.RunID == runID {
			ends++
			if r.Outcome != string(runtime.ReasonCancelled) {
				t.Errorf("run.end outcome %q, want cancelled", r.Outcome)
			}
		}
	}
	if ends != 1 {
		t.Errorf("%d run.end records for the cancelled run", ends)
	}
}

// A client that never reads its notifications neither slows its own run
// nor stalls another client.
func TestDaemonSlowReaderDoesNotStallOthers(t *testing.T) {
	needDaemon(t)
	root := extraSkill(t, "flood", "scripts/flood.sh", floodScript)
	if err := os.WriteFile(filepath.Join(root, "flood", "scripts", "hi.sh"), []byte("echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newItDaemon(t, root)
	d.start()
	ctx := ctxT(t)

	// The slow client: a raw connection that sends its calls and then
	// reads nothing while its run floods it with notifications.
	nc, err := net.Dial("unix", d.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	send := func(id int, method string, params any) map[string]any {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if _, err := nc.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	read := func() map[string]any {
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(line, &m)
		return m
	}
	send(1, "sessions.create", map[string]any{})
	sid := read()["result"].(map[string]any)["session_id"].(string)
	send(2, "skills.load", map[string]any{"session_id": sid, "names": []string{"flood"}})
	read()
	send(3, "skills.run_script", map[string]any{"session_id": sid, "path": "scripts/flood.sh", "stream": true})

	// Meanwhile another client works normally, runs included.
	c := d.client()
	sid2 := must[string](t, "sessions.create")(c.NewSession(ctx))
	must[*api.LoadResult](t, "skills.load")(c.LoadSkills(ctx, api.Peer{}, api.LoadParams{SessionID: sid2, Names: []string{"flood"}}))
	for i := 0; i < 3; i++ {
		res := must[*api.RunScriptResult](t, "run_script")(c.RunScript(ctx, api.Peer{}, api.RunScriptParams{RunInputs: api.RunInputs{SessionID: sid2, Stream: true}, Path: "scripts/hi.sh"}))
		if res.Stdout != "hi\n" {
			t.Fatalf("other client's run: %+v", res)
		}
	}

	// The slow client's run was not held up by its full socket: its
	// run.end is in the audit log before it reads anything.
	waitfor.True(t, "the flooding run to end", 2*time.Minute, func() bool {
		for _, r := range d.records() {
			if r.Event == "run.end" && r.Run != nil && r.Run.Script == "scripts/flood.sh" {
				return true
			}
		}
		return false
	})
	// Now it reads: notifications (some dropped, and said so), then the
	// result with the whole output.
	dropped := false
	for {
		m := read()
		if m["method"] == api.EventRunOutputDropped {
			dropped = true
			continue
		}
		if m["method"] != nil {
			continue
		}
		res, _ := m["result"].(map[string]any)
		if res == nil {
			t.Fatalf("flood run answered %v", m)
		}
		out, _ := res["stdout"].(string)
		if !strings.Contains(out, fmt.Sprintf("%01023d\n", 899)) && res["stdout_truncated"] != true {
			t.Errorf("result lacks the end of the output (%d bytes)", len(out))
		}
		break
	}
	t.Logf("drop marker seen: %v", dropped)
}
