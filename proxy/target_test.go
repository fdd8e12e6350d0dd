package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// rawRequest sends one HTTP/1.1 request line as written (no client
// library re-encodes it) and returns the status.
func rawRequest(t *testing.T, addr, line, headers string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: x\r\n%sContent-Length: 0\r\nConnection: close\r\n\r\n", line, headers)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// TestProxyTargetAndMethodReadings: #26 items 2 and 3 on `fencegate
// proxy`. A raw '#' in the request target (Go's server keeps it in the
// path) is refused 400 for every method; its encoded form is checked
// under the key the upstream reads ("docs/a#b", the upstream receiving
// /docs/a%23b). A lower-case write method is a write wherever its
// upper-case one is, and POST ?_method=DELETE is a write on a route whose
// only write is DELETE (the proxy refuses override headers outright). The
// broken variant (skipTarget) forwards "#" writes: the check then holds
// under "docs/a#b", which is also what the upstream is handed, so the
// proxy was never inconsistent there; the refusal makes every edge answer
// alike.
func TestProxyTargetAndMethodReadings(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	a := locktest.Acquire(t, s, "docs/a", time.Minute).Fence
	locktest.Release(t, s, locktest.Acquire(t, s, "docs/a#b", time.Minute).LockID)
	ab := locktest.Acquire(t, s, "docs/a#b", time.Minute).Fence // 2: docs/a's 1 is not current here
	up, got := recorder(t)
	u := up.URL
	entries := []config.Route{
		{Name: "docs", Match: prefix("/docs"), Upstream: u, Key: "docs/{2}", Methods: "DELETE"},
		{Name: "rest", Match: prefix("/"), Upstream: u, Key: "docs/{2}"},
	}
	_, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{}), entries, Options{})
	addr := strings.TrimPrefix(srv.URL, "http://")
	tok := func(f string) string { return "X-Fence-Token: " + f + "\r\n" }
	for _, tc := range []struct {
		line, headers string
		want          int
		upstream      string // the path the upstream must have received on 200
	}{
		{"DELETE /docs/a#b", tok(a), 400, ""},
		{"DELETE /docs/a#b", tok(ab), 400, ""},
		{"GET /docs/a#b", "", 400, ""},
		{"DELETE /docs/a%23b", tok(ab), 200, "/docs/a%23b"},
		{"DELETE /docs/a%23b", tok(a), 409, ""},
		{"delete /docs/a", "", 428, ""},
		{"Delete /docs/a", tok(a), 200, "/docs/a"},
		{"POST /docs/a", "", 200, "/docs/a"},
		{"POST /docs/a?_method=DELETE", "", 428, ""},
		{"POST /docs/a?_method=delete", tok(a), 200, "/docs/a?_method=delete"},
		{"GET /docs/a", "X-HTTP-Method-Override: DELETE\r\n", 400, ""},
	} {
		if st := rawRequest(t, addr, tc.line, tc.headers); st != tc.want {
			t.Errorf("%s: %d, want %d", tc.line, st, tc.want)
			continue
		}
		if tc.want == 200 {
			if sn := <-got; sn.path != tc.upstream {
				t.Errorf("%s: the upstream received %q, want %q", tc.line, sn.path, tc.upstream)
			}
		}
	}
	// The broken variant forwards a raw '#', checked under docs/a#b.
	_, broken := serveProxy(t, fencecheck.New(s, fencecheck.Options{}), entries, Options{skipTarget: true})
	if st := rawRequest(t, strings.TrimPrefix(broken.URL, "http://"), "DELETE /docs/a#b", tok(ab)); st != 200 {
		t.Fatalf("skipTarget: %d, want 200 (forwarded)", st)
	}
	if sn := <-got; sn.path != "/docs/a%23b" {
		t.Errorf("skipTarget: the upstream received %q", sn.path)
	}
}
