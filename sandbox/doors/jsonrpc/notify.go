package jsonrpc

import (
	"context"
	"encoding/json"
)

// TryNotify queues a notification (a request without id) to the call's
// client without waiting: it reports false, sending nothing, when the
// connection's queue of notifications is full because the client reads
// slowly. Notifications of a call are written before its response.
func (c *Call) TryNotify(method string, params any) bool {
	if c.conn == nil {
		return false
	}
	line, err := marshalNotification(method, params)
	if err != nil {
		c.conn.log.Error("cannot marshal notification", "method", method, "error", err)
		return false
	}
	c.notified.Store(true)
	select {
	case c.conn.notes <- note{line: line}:
		return true
	default:
		return false
	}
}

// Notify queues a notification, waiting for room until ctx is done or the
// connection closes (a client that stops reading is disconnected after
// WriteTimeout).
func (c *Call) Notify(ctx context.Context, method string, params any) error {
	if c.conn == nil {
		return nil
	}
	line, err := marshalNotification(method, params)
	if err != nil {
		return err
	}
	c.notified.Store(true)
	return c.conn.enqueue(ctx, note{line: line})
}

// note is a queued notification line, or (done set) a barrier that
// writeNotes closes once every line queued before it is written.
type note struct {
	line []byte
	done chan struct{}
}

// enqueue waits for room in the notification queue.
func (c *conn) enqueue(ctx context.Context, n note) error {
	select {
	case c.notes <- n:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return context.Cause(c.ctx)
	}
}

// writeNotes writes queued notifications until the connection ends. It is
// the only goroutine that waits for a slow client to read notifications,
// so neither the calls that emit them nor other connections wait.
func (c *conn) writeNotes() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case n := <-c.notes:
			if n.done != nil {
				close(n.done)
				continue
			}
			c.writeLine(n.line)
		}
	}
}

// marshalNotification builds one notification line (with its newline).
func marshalNotification(method string, params any) ([]byte, error) {
	b, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", method, params})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
