package proxy

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil"
)

// TestProxyLogFlood: a client that makes 60 upstream exchanges fail in a
// row (the upstream drops each connection), each with a 20 KB path, gets
// at most DefaultLogBurst warn lines written per window, none over 1 KB;
// the first line after the window reports how many were held back. The
// broken variant (one full line per exchange, as before) is caught by the
// count (the transport's errors do not quote the URL today; the length
// bound guards errAttr).
func TestProxyLogFlood(t *testing.T) {
	const n = 60
	const window = 2 * time.Second
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(up.Close)
	long := "/" + strings.Repeat("a", 20<<10)
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			var sink testutil.LogBuffer
			logger := testutil.Logger(&sink, slog.LevelDebug)
			_, srv := serveProxy(t, fencecheck.New(nil, fencecheck.Options{}), []config.Route{{Name: "r", Match: prefix("/"), Upstream: up.URL}},
				Options{Logger: logger, skipLogBounds: broken, logWindow: window})
			start := time.Now()
			for range n {
				if res, _ := do(t, "GET", srv.URL+long+"?q="+strings.Repeat("b", 1000), nil, ""); res.StatusCode != http.StatusBadGateway {
					t.Fatalf("status %d, want 502", res.StatusCode)
				}
			}
			flood := time.Since(start)
			warns, longest := 0, 0
			for _, l := range sink.Lines() {
				if strings.Contains(l, "level=WARN") {
					warns++
				}
				longest = max(longest, len(l))
			}
			var problems []string
			// The flood may span a window boundary on a slow machine: one
			// burst per window it took.
			if limit := DefaultLogBurst * (int(flood/window) + 1); warns > limit {
				problems = append(problems, fmt.Sprintf("%d warn lines for %d failed exchanges in %v, want at most %d", warns, n, flood, limit))
			}
			if longest > 1024 {
				problems = append(problems, fmt.Sprintf("a log line of %d bytes", longest))
			}
			if !broken {
				time.Sleep(window - time.Since(start) + 100*time.Millisecond)
				do(t, "GET", srv.URL+"/after", nil, "")
				lines := sink.Lines()
				if last := lines[len(lines)-1]; !strings.Contains(last, "suppressed=") {
					problems = append(problems, fmt.Sprintf("the line after the window does not count the held-back ones: %s", last))
				}
			}
			if broken {
				if len(problems) == 0 {
					t.Fatal("unbounded logging passed: the test cannot fail")
				}
				t.Logf("broken logging caught: %s", strings.Join(problems, "; "))
				return
			}
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
}

func TestLogThrottle(t *testing.T) {
	now := time.Unix(0, 0)
	th := newLogThrottle(2, time.Second)
	th.now = func() time.Time { return now }
	var got []string
	for i := range 5 {
		ok, s := th.allow()
		got = append(got, fmt.Sprintf("%d:%v/%d", i, ok, s))
	}
	now = now.Add(time.Second)
	ok, s := th.allow()
	got = append(got, fmt.Sprintf("next:%v/%d", ok, s))
	want := "0:true/0 1:true/0 2:false/0 3:false/0 4:false/0 next:true/3"
	if strings.Join(got, " ") != want {
		t.Fatalf("got %s, want %s", strings.Join(got, " "), want)
	}
	if b := bounded(strings.Repeat("é", 300)); len(b) > maxLoggedError || !strings.HasSuffix(b, "…") {
		t.Fatalf("bounded: %d bytes %q", len(b), b[len(b)-20:])
	}
}
