package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/skillbox/skillbox/sandbox/api"
)

// A live run's output reaches the browser as Server-Sent Events (GET
// /runs/{run}/output): each event's name is the service's event method
// (run.started, run.output, run.output_dropped, run.exited) and its data
// the event as JSON. The stream ends after run.exited, or when the reader
// goes away. A comment line every outputKeepalive keeps idle proxies and
// the browser from giving up on a quiet run, and lets the server notice a
// reader that is gone.
const (
	outputKeepalive = 15 * time.Second
	// outputWriteTimeout bounds one write, so a reader that stopped
	// reading releases its follower (the run never waits for it).
	outputWriteTimeout = 30 * time.Second
)

func (h *handler) runOutput(w http.ResponseWriter, r *http.Request) {
	p, err := peerOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if _, err := strictQuery(r.URL.RawQuery, nil); err != nil {
		writeError(w, err)
		return
	}
	fl, err := h.svc.FollowRun(r.Context(), p, r.PathValue("run"))
	if err != nil {
		writeError(w, err)
		return
	}
	defer fl.Close()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(write func() error) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(outputWriteTimeout))
		if err := write(); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(func() error { _, err := io.WriteString(w, ": following run "+r.PathValue("run")+"\n\n"); return err }) {
		return
	}
	for {
		ctx, cancel := context.WithTimeout(r.Context(), outputKeepalive)
		evs, err := fl.Next(ctx)
		cancel()
		switch {
		case errors.Is(err, io.EOF):
			return
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			if !send(func() error { _, err := io.WriteString(w, ": keepalive\n\n"); return err }) {
				return
			}
			continue
		case err != nil:
			return
		}
		if !send(func() error { return writeEvents(w, evs) }) {
			return
		}
	}
}

// writeEvents writes evs as Server-Sent Events. JSON has no raw newline,
// so each event's data is one line.
func writeEvents(w io.Writer, evs []api.Event) error {
	for _, ev := range evs {
		data, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode %s event: %w", ev.EventMethod(), err)
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.EventMethod(), data); err != nil {
			return err
		}
	}
	return nil
}
