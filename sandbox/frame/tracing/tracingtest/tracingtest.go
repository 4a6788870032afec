// Package tracingtest is an OTLP/HTTP collector for tests: it decodes the
// export requests skillbox sends (protobuf) and keeps their spans, which
// tests then read as span trees, one per trace.
package tracingtest

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one finished span as a test reads it; attribute values are
// strings (attribute.Value.Emit).
type Span struct {
	Name, ID, Parent, Trace string
	Attrs                   map[string]string
}

// Label is the span's name and, for an audit append, the record's event.
func (s Span) Label() string {
	if ev := s.Attrs["skillbox.event"]; ev != "" {
		return s.Name + " " + ev
	}
	return s.Name
}

// Tree is the spans of one trace as sorted "parent > child" lines.
func Tree(spans []Span) []string {
	byID := map[string]Span{}
	for _, s := range spans {
		byID[s.ID] = s
	}
	var out []string
	for _, s := range spans {
		if p, ok := byID[s.Parent]; ok {
			out = append(out, p.Label()+" > "+s.Label())
		}
	}
	slices.Sort(out)
	return out
}

// ByTrace groups spans by trace id, keeping the traces whose root span is
// named root.
func ByTrace(spans []Span, root string) map[string][]Span {
	all := map[string][]Span{}
	for _, s := range spans {
		all[s.Trace] = append(all[s.Trace], s)
	}
	out := map[string][]Span{}
	for id, list := range all {
		for _, s := range list {
			if s.Parent == "" && s.Name == root {
				out[id] = list
			}
		}
	}
	return out
}

// FromStubs converts the spans of an in-memory exporter.
func FromStubs(stubs tracetest.SpanStubs) []Span {
	var out []Span
	for _, s := range stubs {
		sp := Span{Name: s.Name, ID: s.SpanContext.SpanID().String(), Trace: s.SpanContext.TraceID().String(), Attrs: map[string]string{}}
		if s.Parent.IsValid() {
			sp.Parent = s.Parent.SpanID().String()
		}
		for _, a := range s.Attributes {
			sp.Attrs[string(a.Key)] = a.Value.Emit()
		}
		out = append(out, sp)
	}
	return out
}

// Collector is an OTLP/HTTP trace collector on loopback.
type Collector struct {
	// URL is the collector's base URL (http://127.0.0.1:PORT).
	URL string

	srv      *httptest.Server
	mu       sync.Mutex
	spans    []Span
	services map[string]bool
	bad      []string
}

// Start starts a collector; Close stops it.
func Start() *Collector {
	c := &Collector{services: map[string]bool{}}
	c.srv = httptest.NewServer(c)
	c.URL = c.srv.URL
	return c
}

// Close stops the collector.
func (c *Collector) Close() { c.srv.Close() }

// Spans are the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.spans)
}

// Services are the service.name values of the resources received.
func (c *Collector) Services() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]bool{}
	for k := range c.services {
		out[k] = true
	}
	return out
}

// Err reports the requests the collector could not take (wrong path or
// content type, undecodable protobuf, attributes of an unexpected type).
func (c *Collector) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) == 0 {
		return nil
	}
	return fmt.Errorf("collector refused: %v", c.bad)
}

// ServeHTTP takes one OTLP/HTTP export request (protobuf).
func (c *Collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		c.bad = append(c.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		c.bad = append(c.bad, "undecodable: "+err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				c.services[a.GetValue().GetStringValue()] = true
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{Name: s.Name, ID: hex.EncodeToString(s.SpanId), Parent: hex.EncodeToString(s.ParentSpanId),
					Trace: hex.EncodeToString(s.TraceId), Attrs: map[string]string{}}
				for _, a := range s.Attributes {
					switch v := a.GetValue().GetValue().(type) {
					case *commonv1.AnyValue_StringValue:
						sp.Attrs[a.Key] = v.StringValue
					case *commonv1.AnyValue_IntValue:
						sp.Attrs[a.Key] = attribute.Int64Value(v.IntValue).Emit()
					case *commonv1.AnyValue_BoolValue:
						sp.Attrs[a.Key] = attribute.BoolValue(v.BoolValue).Emit()
					default:
						c.bad = append(c.bad, "attribute "+a.Key+" of an unexpected type")
					}
				}
				c.spans = append(c.spans, sp)
			}
		}
	}
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}
