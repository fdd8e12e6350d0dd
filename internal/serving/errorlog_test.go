package serving

import (
	"bytes"
	"log"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestServerErrorLogIsBounded: net/http's per-connection error lines — a
// peer decides how many and part of what they say — reach the log at most
// errorLogBurst per window, each cut to errorLogLineMax bytes, and the
// next window says how many were dropped. The plain slog bridge (what the
// listeners used before, the broken variant) writes every line whole.
func TestServerErrorLogIsBounded(t *testing.T) {
	const lines = 3 * errorLogBurst
	long := "http: TLS handshake error from 10.0.0.1:1234: " + strings.Repeat("A", 4000)
	for _, tc := range []struct {
		name    string
		logger  func(*slog.Logger, func() time.Time) *log.Logger
		bounded bool
	}{
		{"limited", func(l *slog.Logger, now func() time.Time) *log.Logger {
			return log.New(&limitedWriter{log: l, now: now}, "", 0)
		}, true},
		{"plain bridge (broken variant)", func(l *slog.Logger, _ func() time.Time) *log.Logger {
			return slog.NewLogLogger(l.Handler(), slog.LevelWarn)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			clock := time.Unix(1_000_000, 0)
			el := tc.logger(testutil.Logger(&buf, nil), func() time.Time { return clock })
			for range lines {
				el.Print(long)
			}
			clock = clock.Add(errorLogWindow)
			el.Print("http: one more")
			out := buf.String()
			n := strings.Count(out, "TLS handshake error")
			longest := 0
			for _, l := range strings.Split(out, "\n") {
				longest = max(longest, len(l))
			}
			if !tc.bounded {
				if n != lines || longest < len(long) {
					t.Fatalf("plain bridge wrote %d lines, longest %d: the probe cannot tell", n, longest)
				}
				return
			}
			if n != errorLogBurst {
				t.Errorf("%d lines of %d written in one window, want %d", n, lines, errorLogBurst)
			}
			if longest > errorLogLineMax+200 { // the record's time, level and quoting around the message
				t.Errorf("a line of %d bytes reached the log", longest)
			}
			if !strings.Contains(out, "dropped="+strconv.Itoa(lines-errorLogBurst)) || !strings.Contains(out, "one more") {
				t.Errorf("the next window does not report the drops and log on:\n%s", out)
			}
		})
	}
}
