package lockserver_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
)

// TestUnauthenticatedBodyIsNotAwaited: a lock API request without a valid
// token that announces a body it never sends is answered 401 at once and
// its connection closed; net/http would otherwise wait for the body (up
// to the listener's read timeout, 30 s + maxWait in cmd/fencegate) before
// answering, holding the connection's slot. The control — the same
// request with a valid token — is held waiting for its body, which shows
// the probe tells the two apart. (Before the fix, the first case was held
// like the control.)
func TestUnauthenticatedBodyIsNotAwaited(t *testing.T) {
	e := newEnv(t, locktest.OpenBolt(t), nil)
	srv := &http.Server{Handler: e.srv.Handler(), ReadTimeout: time.Hour, ReadHeaderTimeout: 10 * time.Second}
	ln := testutil.Listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	for _, tc := range []struct {
		name     string
		auth     string
		window   time.Duration
		answered bool
	}{
		{"no token", "", 10 * time.Second, true},
		{"unknown token", "Authorization: Bearer " + unknownTok + "\r\n", 10 * time.Second, true},
		{"valid token (control: the body is awaited)", "Authorization: Bearer " + adminToken + "\r\n", 2 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := fmt.Fprintf(c, "POST /v1/locks/acquire HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", tc.auth); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(tc.window))
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if !tc.answered {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("answered (%v, %v) without its body: the probe cannot tell", res, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("no answer within %v: %v", tc.window, err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized || !res.Close {
				t.Fatalf("status %d, close %v; want 401 and the connection closed", res.StatusCode, res.Close)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("connection not closed after the reply: %v", err)
			}
		})
	}
}
