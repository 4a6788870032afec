package jsonrpc

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/skillbox/skillbox/runtime"
	"github.com/skillbox/skillbox/sandbox/api"
)

// A run's events reach the client as notifications before the response;
// when the client does not keep up, output events are dropped (the emitter
// never waits), a run.output_dropped notification counts them, and
// run.started / run.exited still arrive.
func TestStreamedNotificationsBoundedAndOrdered(t *testing.T) {
	const events, size = 40, 64 << 10
	emitted := make(chan struct{})
	ts := startServer(t, ServerOptions{NotificationQueue: 2}, func(s *Server) {
		s.Handle("run", streamed(func(ctx context.Context, _ api.Peer, _ struct{}) (any, error) {
			sink := api.EventSinkFrom(ctx)
			sink(api.RunStartedEvent{RunID: "run_1"})
			for i := 1; i <= events; i++ {
				sink(api.RunOutputEvent{RunID: "run_1", Stream: api.StreamStdout, Seq: uint64(i), Data: strings.Repeat("x", size)})
			}
			close(emitted) // all emitted without the client reading a byte
			sink(api.RunExitedEvent{RunID: "run_1", Reason: string(runtime.ReasonExit)})
			return map[string]bool{"done": true}, nil
		}))
	})
	c := ts.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"run"}`)
	select {
	case <-emitted:
	case <-time.After(time.Minute):
		t.Fatal("the handler waited for a client that does not read")
	}

	var methods []string
	var delivered, dropped uint64
	var droppedBytes int64
	for {
		c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, err := c.br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		if m.ID != nil {
			if string(m.Result) != `{"done":true}` {
				t.Fatalf("response %s", line)
			}
			break
		}
		methods = append(methods, m.Method)
		switch m.Method {
		case api.EventRunOutput:
			delivered++
		case api.EventRunOutputDropped:
			var d api.RunOutputDroppedEvent
			json.Unmarshal(m.Params, &d)
			dropped += d.Events
			droppedBytes += d.Bytes
		}
	}
	if methods[0] != api.EventRunStarted || methods[len(methods)-1] != api.EventRunExited {
		t.Errorf("notifications %v: want run.started first and run.exited last", methods)
	}
	if dropped == 0 || delivered+dropped != events || droppedBytes != int64(dropped)*size {
		t.Errorf("%d delivered, %d dropped (%d bytes) of %d", delivered, dropped, droppedBytes, events)
	}
}
