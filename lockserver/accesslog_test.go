package lockserver_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/bolt"
)

// TestParseAccessLog: the three names, "" as the default (errors), and an
// error naming the choices for anything else.
func TestParseAccessLog(t *testing.T) {
	for in, want := range map[string]lockserver.AccessLog{"": lockserver.AccessErrors, "errors": lockserver.AccessErrors, "off": lockserver.AccessOff, "all": lockserver.AccessAll} {
		got, err := lockserver.ParseAccessLog(in)
		if err != nil || got != want {
			t.Errorf("ParseAccessLog(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := lockserver.ParseAccessLog("some"); err == nil || !strings.Contains(err.Error(), "off, errors or all") {
		t.Errorf("ParseAccessLog(some): %v", err)
	}
	var zero lockserver.Options
	if zero.AccessLog != lockserver.AccessErrors {
		t.Errorf("zero Options.AccessLog is %v, want errors", zero.AccessLog)
	}
}

// TestAccessLogModes: per mode, which of a success (200), a contended
// acquire (409: an outcome, not a fault), an unauthenticated request (401),
// an unknown path (404) and a slow success (an acquire whose store call
// takes lockserver.SlowRequest) get an access log line.
func TestAccessLogModes(t *testing.T) {
	for _, c := range []struct {
		mode                              lockserver.AccessLog
		ok, contended, unauth, miss, slow bool
	}{
		{lockserver.AccessOff, false, false, false, false, false},
		{lockserver.AccessErrors, false, false, true, true, true},
		{lockserver.AccessAll, true, true, true, true, true},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			e := newEnv(t, slowAcquire{locktest.OpenBolt(t)}, func(o *lockserver.Options) { o.AccessLog = c.mode })
			lines := func() []string {
				var out []string
				for _, l := range strings.Split(e.logs.String(), "\n") {
					if strings.Contains(l, `"msg":"http request"`) {
						out = append(out, l)
					}
				}
				return out
			}
			logged := func(what string, want bool, status int) {
				t.Helper()
				var got bool
				for _, l := range lines() {
					got = got || strings.Contains(l, `"status":`+strconv.Itoa(status)+`,`)
				}
				if got != want {
					t.Errorf("%s (%d): logged=%v, want %v; access lines:\n%s", what, status, got, want, strings.Join(lines(), "\n"))
				}
			}

			if r := e.post(t, "/v1/locks/acquire", adminToken, map[string]any{"key": "orders/a", "ttlMs": 60000}); r.status != 200 {
				t.Fatalf("acquire: %d %s", r.status, r.raw)
			}
			logged("success", c.ok, 200)
			if r := e.post(t, "/v1/locks/acquire", adminToken, map[string]any{"key": "orders/a"}); r.status != 409 {
				t.Fatalf("contended acquire: %d %s", r.status, r.raw)
			}
			logged("contended", c.contended, 409)
			if r := e.post(t, "/v1/locks/acquire", "", map[string]any{"key": "orders/b"}); r.status != 401 {
				t.Fatalf("unauthenticated: %d", r.status)
			}
			logged("unauthenticated", c.unauth, 401)
			if r := e.post(t, "/v1/nope", adminToken, map[string]any{}); r.status != 404 {
				t.Fatalf("unknown path: %d", r.status)
			}
			logged("unknown path", c.miss, 404)

			before := len(lines())
			if r := e.post(t, "/v1/locks/acquire", adminToken, map[string]any{"key": "slow/a", "ttlMs": 60000}); r.status != 200 || r.body["ok"] != true {
				t.Fatalf("slow acquire: %d %s", r.status, r.raw)
			}
			if got := len(lines()) > before; got != c.slow {
				t.Errorf("slow success: logged=%v, want %v; access lines:\n%s", got, c.slow, strings.Join(lines(), "\n"))
			}
		})
	}
}

// slowAcquire is a store whose acquires of "slow/…" keys take
// lockserver.SlowRequest: a request that succeeds slowly.
type slowAcquire struct{ *bolt.Store }

func (s slowAcquire) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	if strings.HasPrefix(key, "slow/") {
		time.Sleep(lockserver.SlowRequest)
	}
	return s.Store.Acquire(ctx, key, ttl)
}

// TestAccessLogModesGRPC: the gRPC lock API follows the same modes: a
// successful call, an unauthenticated one (Unauthenticated) and a slow
// success.
func TestAccessLogModesGRPC(t *testing.T) {
	for _, c := range []struct {
		mode             lockserver.AccessLog
		ok, unauth, slow bool
	}{
		{lockserver.AccessOff, false, false, false},
		{lockserver.AccessErrors, false, true, true},
		{lockserver.AccessAll, true, true, true},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			g := newGRPCEnv(t, slowAcquire{locktest.OpenBolt(t)}, func(o *lockserver.Options) { o.AccessLog = c.mode })
			count := func() int { return strings.Count(g.logs.String(), `"msg":"grpc request"`) }
			step := func(what string, want bool, call func() error) {
				t.Helper()
				before := count()
				_ = call()
				if got := count() > before; got != want {
					t.Errorf("%s: logged=%v, want %v; logs:\n%s", what, got, want, g.logs.String())
				}
			}
			step("success", c.ok, func() error {
				_, err := g.client.Acquire(bearer(adminToken), &fencegatev1.AcquireRequest{Key: "orders/a"})
				return err
			})
			step("unauthenticated", c.unauth, func() error {
				_, err := g.client.Acquire(bearer(""), &fencegatev1.AcquireRequest{Key: "orders/b"})
				return err
			})
			step("slow success", c.slow, func() error {
				_, err := g.client.Acquire(bearer(adminToken), &fencegatev1.AcquireRequest{Key: "slow/a"})
				return err
			})
		})
	}
}
