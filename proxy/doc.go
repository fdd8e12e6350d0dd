// Package proxy is `fencegate proxy`: a fencing reverse proxy on
// net/http/httputil, to run as a sidecar or a front proxy. It serves the
// route table's entries that have an upstream (routes.Entry.Upstream),
// matched by the table's own matcher (routes.Table.MatchRequest) on the
// table a routes.Holder holds, so a reload applies without a restart and
// the proxy governs a request by the entry every other edge would; every
// request is checked with fencecheck exactly as the other edges check it, with the same
// headers (x-fence-verified set towards upstream for a checked current
// fence, x-fence-lock-id always stripped), the same denial statuses and
// bodies, audit events and metrics.
//
// Because the proxy sees the upstream's response, it can keep the write
// barrier (the entry's barrier; see fencecheck): a write admitted under the
// barrier is finished when its upstream response body has been read to the
// end without error, and abandoned otherwise (the store then lets newer
// fences in MaxWrite after its admission). To keep that promise:
//   - a barrier write's upstream exchange is cancelled at MaxWrite after its
//     check began, so it can never still be running when its entry expires
//     (an API that commits after the proxy hung up is beyond any edge's
//     reach: set MaxWrite above the API's longest write);
//   - it does not follow the client's cancellation: a client that leaves
//     mid-response does not cut the exchange short; the proxy reads the rest
//     of the body (up to Options.DrainLimit) and finishes the write;
//   - a fenced write never upgrades (one that got a 101 anyway is
//     abandoned, never finished).
//
// Protocol upgrades (WebSocket, h2c, CONNECT) are refused unless the route
// has Upgrade, and then for reads only: after a 101 the tunnel carries
// writes nobody checks.
//
// Paths: a request path that a normaliser would change ("//", dot
// segments, an encoded "/") is refused 400 before routing, since the
// upstream could resolve it under another entry than the one matched. A
// request the table finds no one entry for (a path or method an upstream
// reading it another way would route elsewhere, a malformed Host where
// entries name hosts) is refused 400 malformed, audited
// (routes.Table.Refuse), reads too: the proxy has no one entry to send it
// to. No entry, or an entry without an upstream: 404, for every method.
//
// Headers: hop-by-hop headers (and any named in Connection) are removed
// both ways by httputil.ReverseProxy; X-Forwarded-For/-Host/-Proto are set
// afresh from the connection (SetXForwarded), the client's own dropped
// unless Options.TrustForwarded. Client headers an upstream could read as
// the proxy's, in any spelling ("_" for "-", as CGI reads them), are
// stripped; method overrides are refused (headers.go). Request and
// response bodies stream.
//
// Timeouts: the upstream transport's (Default* constants, Options.Transport
// to replace them); the check's own (fencecheck.Options.Timeout); the
// request body's (the entry's bodyIdleTimeout and bodyTimeout: the
// connection's read deadline, bodydeadline.go); MaxWrite for barrier
// writes. Warn lines clients can cause are throttled (logthrottle.go). The listener's (header read, idle, shutdown) belong to
// the http.Server the proxy is mounted on: `fencegate proxy` sets them.
// Graceful drain is http.Server.Shutdown: a barrier write finishes (or is
// abandoned) before its handler returns, so a drained proxy has deregistered
// every write it admitted.
package proxy
