package jsonrpc

import (
	"bytes"
	"testing"
	"time"
	"unicode/utf8"
)

// Finding 7: an id that is not valid UTF-8 is never echoed raw.
func TestInvalidUTF8IDNotEchoed(t *testing.T) {
	ts := startServer(t, ServerOptions{}, nil)
	c := ts.dial(t)
	for _, line := range []string{
		"{\"jsonrpc\":\"2.0\",\"id\":\"a\xff\x1b[31m\",\"method\":\"echo\"}",
		"{\"jsonrpc\":\"2.0\",\"id\":\"\xc3\",\"method\":\"nope\"}",
	} {
		c.send(line)
		c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := c.br.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.Valid(got) || bytes.Contains(got, []byte{0xff}) || bytes.Contains(got, []byte{0xc3, '"'}) {
			t.Errorf("response echoes an invalid UTF-8 id: %q", got)
		}
	}
}
