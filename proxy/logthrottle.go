package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// Bounds on what clients can make the proxy log. An upstream exchange that
// fails is logged at warn, and a client can make them fail (by leaving, by
// stalling its body, by asking for what a broken upstream cannot answer):
// one line each would let anyone flood the logs. And errors carry request
// values (net/http's quote the whole URL, path and query included).
const (
	// DefaultLogBurst lines of one kind per DefaultLogWindow are written;
	// the rest are counted and the count is reported on the next line
	// written (as "suppressed").
	DefaultLogBurst  = 10
	DefaultLogWindow = 10 * time.Second
	// maxLoggedError bounds the text of an error in a log line.
	maxLoggedError = 256
)

// logThrottle lets at most burst lines through per window.
type logThrottle struct {
	burst  int
	window time.Duration
	now    func() time.Time
	// off lets every line through (only the tests set it).
	off bool

	mu         sync.Mutex
	start      time.Time
	n          int
	suppressed int64
}

func newLogThrottle(burst int, window time.Duration) *logThrottle {
	return &logThrottle{burst: burst, window: window, now: time.Now}
}

// allow reports whether a line may be written now and, if so, how many
// were held back since the last one written.
func (t *logThrottle) allow() (bool, int64) {
	if t.off {
		return true, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if now := t.now(); now.Sub(t.start) >= t.window {
		t.start, t.n = now, 0
	}
	if t.n >= t.burst {
		t.suppressed++
		return false, 0
	}
	t.n++
	s := t.suppressed
	t.suppressed = 0
	return true, s
}

// log writes one line through the throttle.
func (t *logThrottle) log(ctx context.Context, l *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	if !l.Enabled(ctx, level) {
		return
	}
	ok, suppressed := t.allow()
	if !ok {
		return
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	l.LogAttrs(ctx, level, msg, attrs...)
}

// errAttr logs err without the request values it may quote: a *url.Error
// (what the transport returns) loses its URL, and the text is cut at
// maxLoggedError bytes.
func errAttr(err error) slog.Attr {
	if err == nil {
		return slog.String("error", "")
	}
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		msg = ue.Op + ": " + ue.Err.Error()
	}
	return slog.String("error", bounded(msg))
}

// bounded cuts s to maxLoggedError bytes (lockstore.Clip: at a rune
// boundary, the cut marked).
func bounded(s string) string { return lockstore.Clip(s, maxLoggedError) }

// throttledWriter is httputil.ReverseProxy's ErrorLog output: one warn
// line per message, through the throttle, bounded.
type throttledWriter struct {
	t     *logThrottle
	log   *slog.Logger
	bound bool
}

func (w throttledWriter) Write(b []byte) (int, error) {
	msg := strings.TrimSpace(string(b))
	if w.bound {
		msg = bounded(msg)
	}
	w.t.log(context.Background(), w.log, slog.LevelWarn, "proxy: "+msg)
	return len(b), nil
}
