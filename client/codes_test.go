package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// failingStore is the real store, except that acquiring "fail/<Code>" fails
// with that code, as a backend would.
type failingStore struct{ lockstore.Store }

func (s failingStore) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	if c, ok := strings.CutPrefix(key, "fail/"); ok {
		return lockstore.AcquireResult{}, &lockstore.Error{Code: lockstore.Code(c), Op: "acquire", Msg: "injected " + c}
	}
	return s.Store.Acquire(ctx, key, ttl)
}

// codeMismatches acquires "fail/<Code>" for every code through a client of
// kind k and lists the codes that did not come back as themselves.
func codeMismatches(t *testing.T, k kind, g *gatewayEnv) []string {
	t.Helper()
	c := k.client(t, k.addr(g), token)
	var bad []string
	for _, code := range lockstore.Codes {
		_, err := c.Acquire(context.Background(), "fail/"+string(code), time.Second)
		if got := lockstore.CodeOf(err); got != code {
			bad = append(bad, fmt.Sprintf("%s came back as %s (%v)", code, got, err))
		}
	}
	return bad
}

// TestEveryCodeRoundTrips: each LockError code a backend fails with
// reaches the caller as the same code, over both transports, through the
// real server's mapping (api) and the clients' (client, api/wire).
func TestEveryCodeRoundTrips(t *testing.T) {
	wrap := func(s lockstore.Store) lockstore.Store { return failingStore{s} }
	forEachKind(t, func(t *testing.T, k kind) {
		for _, m := range codeMismatches(t, k, gatewayWith(t, gatewayConfig{wrap: wrap})) {
			t.Error(m)
		}
	})

	// The same check must catch a server that drops the ErrorInfo detail:
	// AcquisitionTimeout and NetworkTimeout share DEADLINE_EXCEEDED, so
	// the status code alone cannot carry every code.
	t.Run("broken server without the detail is caught", func(t *testing.T) {
		strip := grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			if st, ok := status.FromError(err); ok && err != nil {
				return resp, status.Error(st.Code(), st.Message())
			}
			return resp, err
		})
		g := gatewayWith(t, gatewayConfig{wrap: wrap, grpcOpts: []grpc.ServerOption{strip}})
		bad := codeMismatches(t, kinds[1], g)
		if len(bad) == 0 {
			t.Fatal("every code round-tripped without the ErrorInfo detail: the check cannot fail")
		}
		if len(bad) != 1 || !strings.HasPrefix(bad[0], string(lockstore.AcquisitionTimeout)+" came back as "+string(lockstore.NetworkTimeout)) {
			t.Errorf("without the detail, want only AcquisitionTimeout lost, got %q", bad)
		}
	})
}
