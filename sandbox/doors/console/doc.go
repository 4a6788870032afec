// Package console is the console's server side: a JSON API over HTTP for
// the security team's pages (pending confirmations, live runs, audit
// search, per-skill history, proposals), and the loopback bridge that
// `skillbox console` runs so a browser can reach it.
//
// The API is served on its own Unix socket beside the daemon's JSON-RPC
// socket (ConsoleSocket names it), made with the same mode, group and
// directory checks (sockfile.Listen). A second socket rather than sniffing
// the first bytes of each connection on the main one keeps the JSON-RPC
// server's connection budget, line limits and refusal audit untouched by
// HTTP, and an HTTP parser away from the socket every agent uses; the
// caller's identity is still the kernel's (SO_PEERCRED,
// jsonrpc.PeerCredentials), read once per connection.
//
// The API handlers decode, call the service (sandbox/core/service: the one
// authorization path, the same methods the socket's calls reach) with the
// connection's peer, and encode; errors are JSON with the service's error
// kinds. The bridge adds what a browser needs and a socket does not: a
// one-time token traded for an HttpOnly SameSite=Strict cookie, a Host
// check against DNS rebinding and an Origin check against cross-site
// requests. It never authorizes anything itself: the daemon sees the
// bridge's uid, the uid of whoever started the console. It also serves the
// pages (sandbox/doors/console/web, embedded) under a Content-Security-Policy
// that allows no inline script, so the pages need nothing but the bridge.
package console
