package runtime

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

type recordSink struct{ bytes.Buffer }

func TestCaptureCapsAndSignals(t *testing.T) {
	sink := &recordSink{}
	c := newCapture(10, sink)
	c.drain(io.MultiReader(strings.NewReader("hello "), strings.NewReader("world, and more")))
	got, trunc := c.result()
	if string(got) != "hello worl" || !trunc {
		t.Errorf("got %q truncated %v", got, trunc)
	}
	if sink.String() != "hello worl" {
		t.Errorf("sink got %q: it must see only what is kept", sink.String())
	}
	select {
	case <-c.over:
	default:
		t.Error("over not signalled")
	}
	select {
	case <-c.done:
	default:
		t.Error("done not closed after EOF")
	}
}

func TestCaptureUnderCap(t *testing.T) {
	c := newCapture(100, nil)
	c.drain(strings.NewReader("short"))
	got, trunc := c.result()
	if string(got) != "short" || trunc {
		t.Errorf("got %q truncated %v", got, trunc)
	}
	select {
	case <-c.over:
		t.Error("over signalled under the cap")
	default:
	}
}

func TestCaptureExactCap(t *testing.T) {
	c := newCapture(5, nil)
	c.drain(strings.NewReader("12345"))
	if got, trunc := c.result(); string(got) != "12345" || trunc {
		t.Errorf("got %q truncated %v", got, trunc)
	}
}
