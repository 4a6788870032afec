package siem

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/skillbox/skillbox/sandbox/core/audit"
)

// Export maps the records of dir that pass f and writes them to sink, all
// replicas' chains merged by time (audit.Scan), and flushes it. It returns
// how many records it wrote.
func Export(dir string, f audit.Filter, m *Mapper, sink Sink) (int, error) {
	fw := forwarder{filter: f, mapper: m, sink: sink}
	err := audit.Scan(dir, fw.forward)
	if ferr := sink.Flush(); err == nil {
		err = ferr
	}
	return fw.n, err
}

// Follow is Export for records as they are written: it starts with the
// last n records of dir's chain (0: only new ones) and then maps and
// writes each new record that passes f, flushing the sink record by
// record, until ctx ends. It follows one chain across rotation as `audit
// tail -f` does (audit.Tail; a dir of several replicas' chains is refused
// with their names).
func Follow(ctx context.Context, dir string, n int, f audit.Filter, m *Mapper, sink Sink) (int, error) {
	fw := forwarder{filter: f, mapper: m, sink: sink, flushEach: true}
	err := audit.Tail(ctx, dir, audit.TailOptions{N: n, Follow: true}, fw.forward)
	if ferr := sink.Flush(); err == nil {
		err = ferr
	}
	return fw.n, err
}

// forwarder filters, maps and writes one entry at a time.
type forwarder struct {
	filter    audit.Filter
	mapper    *Mapper
	sink      Sink
	flushEach bool
	n         int
}

func (fw *forwarder) forward(e *audit.Entry) error {
	if !fw.filter.Match(e.Record) {
		return nil
	}
	msg, err := fw.mapper.Map(e.Raw, e.Record)
	if err != nil {
		return fmt.Errorf("%s at byte %d: %w", filepath.Join(e.Chain, e.File), e.Offset, err)
	}
	if err := fw.sink.Write(msg); err != nil {
		return err
	}
	fw.n++
	if fw.flushEach {
		return fw.sink.Flush()
	}
	return nil
}
