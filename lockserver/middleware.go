package lockserver

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/lockstore"
)

// requestInfo is what a handler learns that the access log line needs.
type requestInfo struct {
	token string         // the authenticated token's name, never its secret
	code  lockstore.Code // the LockError code of an error reply
}

// setErrorCode and setPrincipal reach the request's requestInfo through
// the writer Middleware handed the handler (its statusRecorder) rather
// than through the request's context: a context value costs every request
// a context and a copy of the *http.Request (r.WithContext). A handler not
// behind Middleware has no access log line to fill.
func setErrorCode(w http.ResponseWriter, c lockstore.Code) {
	if rec, ok := w.(*statusRecorder); ok {
		rec.info.code = c
	}
}

func setPrincipal(w http.ResponseWriter, p *auth.Principal) {
	if rec, ok := w.(*statusRecorder); ok && p != nil {
		rec.info.token = p.Name
	}
}

// statusRecorder remembers the status and size of a reply for the access
// log and for a panicking handler (a reply already started cannot become a
// 500), and what the handler learnt for the log line (info).
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	info   requestInfo
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Middleware writes the structured access log line of a request, for the
// requests Options.AccessLog selects (by default only failures and slow
// requests). A handler
// that panics is answered 500 Internal (the lock API's error body) and
// logged so; the panic then goes on to the listener's recovery, which logs
// the stack and keeps the server up (cmd/fencegate installs it). The line carries the route
// the request matched, not its path: forward-auth requests carry the
// protected API's path after /v1/authz/check/, and that path may be a key;
// GET /v1/locks/status takes the key in its query. Then the
// status, size, duration and the token's name; never a key, lockId or
// token. Probe and scrape paths log at debug level.
func (s *Server) Middleware(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		ri := &rec.info
		panicking := true
		defer func() {
			if panicking && rec.status == 0 {
				ri.code = lockstore.Internal
				writeJSON(rec, http.StatusInternalServerError,
					errorReply{errorBody{Code: lockstore.Internal, Message: "internal error"}})
			}
			d := time.Since(start)
			route := logRoute(r)
			slowness := d
			if longByDesign(route) {
				slowness = 0
			}
			if !s.access.logs(rec.status, slowness) {
				return
			}
			level := slog.LevelInfo
			if isProbePath(route) {
				level = slog.LevelDebug
			}
			// Enabled first: the attrs are built only for a line that is written.
			if !s.log.Enabled(r.Context(), level) {
				return
			}
			s.log.LogAttrs(r.Context(), level, "http request",
				slog.String("method", r.Method),
				slog.String("route", route),
				slog.Int("status", rec.status),
				slog.Int64("bytes", rec.bytes),
				slog.Duration("duration", d),
				slog.String("token", ri.token),
				slog.String("code", string(ri.code)),
				slog.String("remote", r.RemoteAddr),
			)
		}()
		h.ServeHTTP(rec, r)
		panicking = false
	})
}

// logRoute is what logs say about a request's path: the ServeMux pattern
// it matched (without a method), which never contains a key.
func logRoute(r *http.Request) string {
	p := r.Pattern
	if _, rest, ok := strings.Cut(p, " "); ok {
		p = rest
	}
	if p == "" {
		return "(unmatched)"
	}
	return p
}

func isProbePath(p string) bool {
	return p == "/healthz" || p == "/readyz" || p == "/metrics"
}

// levelFor logs failures the operator must act on (backend down, bugs) at
// warn and error; the caller's own mistakes never reach this function.
func levelFor(c lockstore.Code) slog.Level {
	if c == lockstore.Internal {
		return slog.LevelError
	}
	return slog.LevelWarn
}

// slogAttrs describes a failed request for the error log. The cause's text
// comes from lockstore.Error, which prints only key and lockId hashes.
func slogAttrs(r *http.Request, status int, ae *apiError) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("route", logRoute(r)),
		slog.Int("status", status),
		slog.String("code", string(ae.code)),
	}
	if ae.cause != nil {
		attrs = append(attrs, slog.String("err", ae.cause.Error()))
	}
	return attrs
}

// tokenName is the name of the caller's token for logs ("" when auth is
// off or the caller did not authenticate).
func tokenName(p *auth.Principal) string {
	if p == nil {
		return ""
	}
	return p.Name
}
