// Package egresstest holds what the egress proxy's tests and the daemon's
// egress integration tests share: an upstream that echoes what reached it,
// so that a test sees whether a secret got through the proxy.
package egresstest

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"net/http"
	"strconv"
)

// Echo answers with the request's headers: in a header (X-Echo-Auth, the
// Authorization), and in the body plain, gzip-encoded (/gzip), chunked a
// few bytes a chunk (/chunked) or base64-encoded (/base64).
func Echo(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	_ = r.Header.Write(&b)
	w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
	body := b.Bytes()
	switch r.URL.Path {
	case "/gzip":
		w.Header().Set("Content-Encoding", "gzip")
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(body)
		zw.Close()
		body = z.Bytes()
	case "/base64":
		body = []byte(base64.StdEncoding.EncodeToString(body))
	case "/chunked":
		// Flushed a few bytes at a time: the value crosses chunks.
		for len(body) > 0 {
			n := min(5, len(body))
			w.Write(body[:n])
			w.(http.Flusher).Flush()
			body = body[n:]
		}
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}
