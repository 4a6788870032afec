package metrics

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/skillbox/skillbox/policy"
	"github.com/skillbox/skillbox/sandbox/doors/connlimit"
	"github.com/skillbox/skillbox/sandbox/doors/sockfile"
)

// Path is where the endpoint answers.
const Path = "/metrics"

// Listen opens the endpoint's listener at addr: a Unix socket made with
// the main socket's rules (mode, group, the directory's checks, the lock
// against a second daemon; sockfile.Listen), or a TCP port on loopback.
func Listen(addr policy.MetricsAddress, mode fs.FileMode, group string) (net.Listener, error) {
	switch addr.Network {
	case "unix":
		ln, err := sockfile.Listen(addr.Address, mode, group)
		if err != nil {
			return nil, fmt.Errorf("metrics socket: %w", err)
		}
		return ln, nil
	case "tcp":
		// The config allows loopback only; check again what is bound.
		if _, err := policy.ParseMetricsAddress(addr.Address); err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", addr.Address)
		if err != nil {
			return nil, fmt.Errorf("metrics address %s: %w", addr.Address, err)
		}
		return ln, nil
	}
	return nil, fmt.Errorf("metrics are off (daemon.metrics is not set)")
}

// Handler serves the registry in Prometheus' formats at Path. A collector
// that fails (the session store cannot be read) leaves its metric out and
// is logged; the others are still served.
func (m *Metrics) Handler(log hclog.Logger) http.Handler {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		ErrorLog:            log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}),
		MaxRequestsInFlight: 4,
		Timeout:             30 * time.Second,
	}))
	return mux
}

// Endpoint is the metrics endpoint being served.
type Endpoint struct {
	srv  *http.Server
	done chan error
}

// Serve serves m on ln until Close.
func (m *Metrics) Serve(ln net.Listener, log hclog.Logger) *Endpoint {
	e := &Endpoint{
		srv: &http.Server{
			Handler:           m.Handler(log),
			ReadHeaderTimeout: connlimit.HeaderTimeout,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      60 * time.Second,
			IdleTimeout:       connlimit.IdleTimeout,
			MaxHeaderBytes:    connlimit.MaxHeaderBytes,
		},
		done: make(chan error, 1),
	}
	go func() {
		err := e.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		e.done <- err
	}()
	return e
}

// Close stops serving (the socket file goes with the listener), waiting
// for scrapes in flight until ctx ends.
func (e *Endpoint) Close(ctx context.Context) error {
	err := e.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = errors.Join(err, e.srv.Close())
	}
	return errors.Join(err, <-e.done)
}
