package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skillbox/skillbox/sandbox/api"
)

// progressBuffer bounds the events waiting for a slow client: the service
// never waits on an MCP client, so past this many pending events they are
// dropped, and the next progress message says how many.
const progressBuffer = 256

// progress returns ctx carrying an event sink that turns a run's events into
// progress notifications for req's progress token, whether the call should
// stream (only when the client sent a token), and a stop function that
// delivers what is pending and must be called once the call returned.
func (c *Conn) progress(ctx context.Context, req *sdk.CallToolRequest) (context.Context, bool, func()) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return ctx, false, func() {}
	}
	var (
		mu      sync.Mutex
		closed  bool
		dropped int
		ch      = make(chan string, progressBuffer)
		done    = make(chan struct{})
	)
	sink := func(e api.Event) {
		msg := eventMessage(e)
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		if dropped > 0 {
			if len(ch) == cap(ch) {
				dropped++
				return
			}
			ch <- fmt.Sprintf("[%d progress messages dropped: the client read them too slowly; the result has the whole output]", dropped)
			dropped = 0
		}
		select {
		case ch <- msg:
		default:
			dropped++
		}
	}
	go func() {
		defer close(done)
		n := 0
		for msg := range ch {
			n++
			err := req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: msg})
			if err != nil {
				c.s.log.Debug("progress notification", "error", err)
			}
		}
	}()
	stop := func() {
		mu.Lock()
		closed = true
		close(ch)
		mu.Unlock()
		<-done
	}
	return api.WithEventSink(ctx, sink), true, stop
}

// eventMessage renders an event as a progress message.
func eventMessage(e api.Event) string {
	switch ev := e.(type) {
	case api.RunStartedEvent:
		return fmt.Sprintf("run %s started: %s %s (image %s, runtime %s)", ev.RunID, ev.Skill, ev.Path, ev.Image, ev.Runtime)
	case api.RunOutputEvent:
		return ev.Stream + ": " + strings.TrimSuffix(ev.Data, "\n")
	case api.RunOutputDroppedEvent:
		return fmt.Sprintf("[%d output chunks (%d bytes) were not streamed; the result has the whole output]", ev.Events, ev.Bytes)
	case api.RunExitedEvent:
		return fmt.Sprintf("run %s ended: %s, exit code %d after %d ms", ev.RunID, ev.Reason, ev.ExitCode, ev.DurationMS)
	default:
		b, _ := json.Marshal(e)
		return e.EventMethod() + " " + string(b)
	}
}

func jsonMarshal(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	return json.RawMessage(b), err
}
