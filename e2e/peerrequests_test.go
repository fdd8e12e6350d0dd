package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/certwatch/certtest"
)

// h2Flood sends perConn concurrent requests on each of conns HTTP/2
// connections (one transport each) from this process's one address, and
// counts the answers: status → count, and how many 429s carried
// Retry-After.
type h2Flood struct {
	mu       sync.Mutex
	statuses map[int]int
	retry    int
	errs     int
	slow     int // answered after slowAfter: they were in flight
}

func floodH2(t *testing.T, pool *x509.CertPool, conns, perConn int, slowAfter time.Duration, req func() *http.Request) *h2Flood {
	t.Helper()
	f := &h2Flood{statuses: map[int]int{}}
	var wg sync.WaitGroup
	for range conns {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 60 * time.Second}
		// One request first, so that the others share its connection.
		if r, err := c.Get(req().URL.Scheme + "://" + req().URL.Host + "/healthz"); err == nil {
			r.Body.Close()
			if r.ProtoMajor != 2 {
				t.Fatalf("the TLS listener answered %s, want HTTP/2", r.Proto)
			}
		}
		for range perConn {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				r, err := c.Do(req())
				f.mu.Lock()
				defer f.mu.Unlock()
				if err != nil {
					f.errs++
					return
				}
				r.Body.Close()
				f.statuses[r.StatusCode]++
				if r.StatusCode == http.StatusTooManyRequests && r.Header.Get("Retry-After") != "" {
					f.retry++
				}
				if time.Since(start) >= slowAfter {
					f.slow++
				}
			}()
		}
	}
	wg.Wait()
	return f
}

// rssKiB is a process's resident set (VmRSS), KiB.
func rssKiB(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var n int
			_, _ = fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &n)
			return n
		}
	}
	return 0
}

// TestPeerRequestsBoundedThroughProxy (#26 item 5): `fencegate proxy` on a
// TLS listener (HTTP/2), 12 connections from one address each sending 100
// slow requests: the upstream never has more than
// connections.maxRequestsPerPeer (default 256) of them in flight, the rest
// are answered 429 with Retry-After at once. The broken variant (the limit
// raised out of reach: the proxy before the fix, bounded by connections
// alone) lets them all through to the upstream: caught. The proxy's RSS at
// the peak is logged for both.
func TestPeerRequestsBoundedThroughProxy(t *testing.T) {
	const conns, perConn = 12, 100
	for _, v := range []struct {
		name   string
		limit  string // connections.maxRequestsPerPeer; "" the default
		want   int
		broken bool
	}{
		{"default limit", "", 256, false},
		{"broken: no request limit", "1000000", 256, true},
	} {
		t.Run(v.name, func(t *testing.T) {
			var inflight, peak atomic.Int64
			release := make(chan struct{})
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := inflight.Add(1)
				defer inflight.Add(-1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				select {
				case <-release:
				case <-time.After(20 * time.Second):
				}
				_, _ = w.Write([]byte("ok"))
			})
			app := httptest.NewServer(up)
			defer app.Close()
			dir := t.TempDir()
			ca := certtest.NewCA(t, "proxy-ca")
			cert, key := ca.Server(t, "proxy", "127.0.0.1").Write(t, dir)
			conf := fmt.Sprintf("connections: {maxPerPeer: 64%s}\nproxy:\n  addr: 127.0.0.1:0\n  tls: {certFile: %q, keyFile: %q}\n  routes:\n    - {name: slow, prefix: /slow, upstream: %s}\n",
				map[bool]string{true: ", maxRequestsPerPeer: " + v.limit, false: ""}[v.limit != ""], cert, key, app.URL)
			cfg := filepath.Join(dir, "proxy.yaml")
			certtest.WriteFile(t, cfg, []byte(conf))
			p := StartProxy(t, "bolt://"+filepath.Join(dir, "p.db"), cfg, "--log-level", "info")
			rssBefore := rssKiB(t, p.cmd.Process.Pid)

			done := make(chan *h2Flood, 1)
			go func() {
				done <- floodH2(t, ca.Pool(), conns, perConn, 0, func() *http.Request {
					r, _ := http.NewRequest(http.MethodGet, "https://"+p.Proxy+"/slow/x", nil)
					return r
				})
			}()
			// Let every request arrive (held or refused), then read the peak.
			deadline := time.Now().Add(15 * time.Second)
			for time.Now().Before(deadline) {
				time.Sleep(500 * time.Millisecond)
				if inflight.Load() >= int64(conns*perConn) || (!v.broken && inflight.Load() >= int64(v.want)) {
					time.Sleep(time.Second) // any more would arrive now
					break
				}
			}
			rssPeak := rssKiB(t, p.cmd.Process.Pid)
			held := peak.Load()
			close(release)
			f := <-done
			t.Logf("%s: %d requests on %d HTTP/2 connections from one address: at most %d in flight at the upstream; answers %v (%d 429s with Retry-After, %d errors); proxy RSS %d → %d KiB",
				v.name, conns*perConn, conns, held, f.statuses, f.retry, f.errs, rssBefore, rssPeak)
			switch {
			case !v.broken && held > int64(v.want):
				t.Fatalf("%d requests from one address in flight at the upstream, over the per-peer figure %d", held, v.want)
			case !v.broken && (held < int64(v.want)/2 || f.statuses[http.StatusTooManyRequests] < conns*perConn-v.want || f.retry != f.statuses[http.StatusTooManyRequests]):
				t.Fatalf("want the figure reached and the rest refused 429 with Retry-After: %d in flight, %v, %d with Retry-After", held, f.statuses, f.retry)
			case !v.broken && f.errs > 0:
				t.Fatalf("%d requests failed outright", f.errs)
			case v.broken && held <= int64(v.want):
				t.Fatalf("without the request limit only %d were in flight: the test cannot tell the limit from its absence", held)
			}
		})
	}
}

// TestPeerRequestsBoundedThroughServe (#26 item 5): `fencegate serve`'s
// HTTP listener on TLS (HTTP/2), 3 connections from one address each
// sending 40 acquires that wait (waitMs) on a held key: with
// connections.maxRequestsPerPeer 20, at most 20 wait, the others are
// answered 429 with Retry-After at once. The broken variant (the limit out
// of reach) lets all 120 wait: caught.
func TestPeerRequestsBoundedThroughServe(t *testing.T) {
	const conns, perConn, limit = 3, 40, 20
	for _, v := range []struct {
		name   string
		limit  int
		broken bool
	}{{"limit 20", limit, false}, {"broken: no request limit", 1000000, true}} {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			ca := certtest.NewCA(t, "serve-ca")
			cert, key := ca.Server(t, "fencegate", "127.0.0.1").Write(t, dir)
			cfg := filepath.Join(dir, "serve.yaml")
			certtest.WriteFile(t, cfg, []byte(fmt.Sprintf("connections: {maxRequestsPerPeer: %d}\nhttp:\n  addr: 127.0.0.1:0\n  tls: {certFile: %q, keyFile: %q}\n", v.limit, cert, key)))
			g := StartGateway(t, "bolt://"+filepath.Join(dir, "g.db"), "--config", cfg, "--log-level", "info")
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
			defer tr.CloseIdleConnections()
			base := "https://" + g.HTTP
			r, err := (&http.Client{Transport: tr}).Post(base+"/v1/locks/acquire", "application/json", strings.NewReader(`{"key":"held","ttlMs":60000}`))
			if err != nil || r.StatusCode != http.StatusOK {
				t.Fatalf("acquire: %v %v", r, err)
			}
			r.Body.Close()
			f := floodH2(t, ca.Pool(), conns, perConn, 1500*time.Millisecond, func() *http.Request {
				r, _ := http.NewRequest(http.MethodPost, base+"/v1/locks/acquire", strings.NewReader(`{"key":"held","ttlMs":60000,"waitMs":2000}`))
				r.Header.Set("Content-Type", "application/json")
				return r
			})
			t.Logf("%s: %d waiting acquires on %d HTTP/2 connections from one address: %d waited; answers %v (%d 429s with Retry-After, %d errors)",
				v.name, conns*perConn, conns, f.slow, f.statuses, f.retry, f.errs)
			switch {
			case !v.broken && (f.slow > limit || f.statuses[http.StatusTooManyRequests] < conns*perConn-limit || f.retry != f.statuses[http.StatusTooManyRequests]):
				t.Fatalf("want at most %d waiting and the rest refused 429 with Retry-After: %d waited, %v", limit, f.slow, f.statuses)
			case v.broken && f.slow <= limit:
				t.Fatalf("without the request limit only %d waited: the test cannot tell the limit from its absence", f.slow)
			}
		})
	}
}
