package testutil

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// LogBuffer collects what concurrent writers (a server's goroutines, a
// slog handler) write, for a test to read at any time.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines is what was written so far, one element a line, without empty
// lines.
func (l *LogBuffer) Lines() []string {
	var out []string
	for line := range strings.SplitSeq(l.String(), "\n") {
		if line != "" {
			out = append(out, line)
		}
	}
	return out
}

// Reset forgets everything written so far.
func (l *LogBuffer) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}

// Logger is a text logger onto w from level on (nil: Info).
func Logger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
