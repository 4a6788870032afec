package oci

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

type recordSink struct{ bytes.Buffer }

func TestCaptureCapsAndSignals(t *testing.T) {
	sink := &recordSink{}
	c := NewCapture(10, sink)
	c.Drain(io.MultiReader(strings.NewReader("hello "), strings.NewReader("world, and more")))
	got, trunc := c.Result()
	if string(got) != "hello worl" || !trunc {
		t.Errorf("got %q truncated %v", got, trunc)
	}
	if sink.String() != "hello worl" {
		t.Errorf("sink got %q: it must see only what is kept", sink.String())
	}
	select {
	case <-c.Over:
	default:
		t.Error("over not signalled")
	}
	select {
	case <-c.Done:
	default:
		t.Error("done not closed after EOF")
	}
}

func TestCaptureUnderCap(t *testing.T) {
	c := NewCapture(100, nil)
	c.Drain(strings.NewReader("short"))
	got, trunc := c.Result()
	if string(got) != "short" || trunc {
		t.Errorf("got %q truncated %v", got, trunc)
	}
	select {
	case <-c.Over:
		t.Error("over signalled under the cap")
	default:
	}
}

func TestCaptureExactCap(t *testing.T) {
	c := NewCapture(5, nil)
	c.Drain(strings.NewReader("12345"))
	if got, trunc := c.Result(); string(got) != "12345" || trunc {
		t.Errorf("got %q truncated %v", got, trunc)
	}
}
