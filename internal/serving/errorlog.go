package serving

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// net/http writes one ErrorLog line per failed connection (a TLS
// handshake, a malformed HTTP/2 preface, a panicking handler's stack is
// logged elsewhere): a peer decides how many and, in part, what they say.
// serverErrorLog passes at most errorLogBurst lines per errorLogWindow,
// each cut to errorLogLineMax bytes, and then says how many it dropped.
const (
	errorLogWindow  = 10 * time.Second
	errorLogBurst   = 10
	errorLogLineMax = 256
)

// serverErrorLog is an http.Server's ErrorLog writing to log at warn.
func serverErrorLog(l *slog.Logger) *log.Logger {
	return log.New(&limitedWriter{log: l, now: time.Now}, "", 0)
}

// limitedWriter turns log.Logger lines into rate-limited slog records.
type limitedWriter struct {
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	start   time.Time // of the current window
	n       int       // lines written in it
	dropped int       // lines dropped in it
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	now := w.now()
	var dropped int
	if now.Sub(w.start) >= errorLogWindow {
		dropped, w.dropped = w.dropped, 0
		w.start, w.n = now, 0
	}
	pass := w.n < errorLogBurst
	if pass {
		w.n++
	} else {
		w.dropped++
	}
	w.mu.Unlock()
	if dropped > 0 {
		w.log.Warn("server errors dropped from the log (rate limit)", "dropped", dropped, "window", errorLogWindow)
	}
	if pass {
		w.log.LogAttrs(context.Background(), slog.LevelWarn, lockstore.Clip(strings.TrimRight(string(p), "\n"), errorLogLineMax))
	}
	return len(p), nil
}
