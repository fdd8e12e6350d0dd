package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/lockstore"
)

// heldTTL outlives a whole benchmark run: the checked locks must stay held
// (and their fences current) from setup to teardown.
const heldTTL = 10 * time.Minute

// benchCheckTimeout is every benchmarked edge's check.timeout. It only
// bounds a check (which takes well under a millisecond when the machine is
// quiet); a scheduler stall on the shared, overloaded machine can pass the
// 150 ms default, and the check would then fail closed (503): correct, but
// it would end the benchmark. The stall still shows, in p99 and p999. It
// stays under nginx's 1 s read timeout for the auth subrequest.
const benchCheckTimeout = 900 * time.Millisecond

// BenchmarkExtAuthz: envoy.service.auth.v3.Authorization/Check answered by
// fencegate's authz server on the Redis store — a write carrying the current
// fence of a held lock, so every check reads Redis and allows — against the
// floor of a no-op Authorization server that answers OK at once, on an
// identical grpc.Server, listener, connection and request.
func BenchmarkExtAuthz(b *testing.B) { runSuite(b, authzSuite) }

// BenchmarkExtAuthzOpenLoop: the same two servers and requests, driven open
// loop — -open-rate checks per second (2,000 by default) started on
// schedule whatever the answers' latency — for p50, p99 and p999 at a rate
// a busy edge sees, rather than at saturation.
func BenchmarkExtAuthzOpenLoop(b *testing.B) { runOpenSuite(b, authzOpenSuite) }

// noopAuthz is the floor: an Authorization server that allows everything
// without looking at the request.
type noopAuthz struct {
	authv3.UnimplementedAuthorizationServer
}

func (noopAuthz) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(code.Code_OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
	}, nil
}

// authzSuite runs the no-op floor first, then fencegate.
func authzSuite(tb testing.TB, nw int) []subject { return authzSubjects(tb, nw, "authz") }

// authzOpenSuite is authzSuite under the open-loop ids.
func authzOpenSuite(tb testing.TB, nw int) []subject { return authzSubjects(tb, nw, "authz-open") }

// authzSubjects builds the no-op floor and fencegate's authz server over
// Redis, with ids under prefix. Both carry the Redis client, so the floor's
// row shows what an idle Redis costs and fencegate's what its checks add.
func authzSubjects(tb testing.TB, nw int, prefix string) []subject {
	store := openRedis(tb)
	reqs, _ := heldWrites(tb, store, nw)

	// benchCheckTimeout, not the 150 ms default (see there).
	checker := fencecheck.New(store, fencecheck.Options{Logger: logger, Timeout: benchCheckTimeout})
	fencegate := authv3.NewAuthorizationClient(serveGRPC(tb, authz.NewServer(checker, authz.Options{Logger: logger}).Register))
	// The floor's server gets a health service too, as authz.Server.Register
	// adds one, so the two grpc.Servers differ only in the Check handler.
	noop := authv3.NewAuthorizationClient(serveGRPC(tb, func(g *grpc.Server) {
		authv3.RegisterAuthorizationServer(g, noopAuthz{})
		healthpb.RegisterHealthServer(g, health.NewServer())
	}))

	return []subject{
		{id: prefix + "/noop", unit: "checks/s", op: checkOp(noop, reqs), redis: store.Client()},
		{id: prefix + "/fencegate-redis", unit: "checks/s", op: checkOp(fencegate, reqs), redis: store.Client()},
	}
}

// heldWrites acquires one lock per worker (released at cleanup) and builds,
// per worker, the CheckRequest Envoy would send for a POST carrying that
// lock's key and current fence. It returns the requests and the locks.
func heldWrites(tb testing.TB, store lockstore.Store, nw int) ([]*authv3.CheckRequest, []lockstore.AcquireResult) {
	tb.Helper()
	reqs := make([]*authv3.CheckRequest, nw)
	held := make([]lockstore.AcquireResult, nw)
	for w, key := range workerKeys("authz", nw) {
		a, err := store.Acquire(tb.Context(), key, heldTTL)
		if err != nil || !a.OK {
			tb.Fatalf("acquire %s: %+v %v", key, a, err)
		}
		tb.Cleanup(func() {
			ctx, cancel := cleanupCtx()
			defer cancel()
			_, _ = store.Release(ctx, a.LockID)
		})
		reqs[w] = envoyWrite(fmt.Sprintf("/orders/%d", w), key, a.Fence)
		held[w] = a
	}
	return reqs, held
}

// envoyWrite is a CheckRequest shaped like the one Envoy's ext_authz filter
// sends: lowercase headers including pseudo-headers, the source peer.
func envoyWrite(path, key, fence string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "10.0.0.7", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 41000}},
		}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "bench", Method: "POST", Path: path, Host: "api.internal", Scheme: "http", Protocol: "HTTP/1.1",
			Headers: map[string]string{
				":method": "POST", ":path": path, ":authority": "api.internal",
				"content-type": "application/json", "user-agent": "bench",
				authz.HeaderKey: key, authz.HeaderToken: fence,
			},
		}},
	}}
}

// checkOp sends worker w's request and requires an OK (several calls may
// share one w: the request is only read): a denial would mean
// the benchmark measures a different path than the allowed write.
func checkOp(c authv3.AuthorizationClient, reqs []*authv3.CheckRequest) op {
	return func(ctx context.Context, w int) error {
		resp, err := c.Check(ctx, reqs[w])
		if err != nil {
			return fmt.Errorf("check: %w", err)
		}
		if got := resp.GetStatus().GetCode(); got != int32(code.Code_OK) {
			return fmt.Errorf("check: code %d, %s", got, resp.GetDeniedResponse().GetBody())
		}
		return nil
	}
}
