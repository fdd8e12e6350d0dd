package authz

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
)

// hangingStore is a backend that never answers: Inspect blocks until the
// check's deadline.
type hangingStore struct{ lockstore.Store }

func (hangingStore) Inspect(ctx context.Context, _ string) (lockstore.KeyState, error) {
	<-ctx.Done()
	return lockstore.KeyState{}, lockstore.ContextError(ctx, "inspect")
}

// serveGRPC runs the ext_authz server over a real grpc.Server on loopback
// and returns a client connection.
func serveGRPC(t testing.TB, c *fencecheck.Checker) *grpc.ClientConn {
	t.Helper()
	return serveOn(t, NewServer(c, Options{}).Register)
}

// serveOn runs a real grpc.Server on loopback with the services register
// adds, stopped at cleanup, and returns a client connection to it.
func serveOn(t testing.TB, register ...func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis := testutil.Listen(t)
	g := grpc.NewServer()
	for _, r := range register {
		r(g)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// envoyRequest builds a CheckRequest the way Envoy's ext_authz filter
// does: lowercase header keys (pseudo-headers included), the path with its
// query, the per-route context_extensions.
func envoyRequest(method, path string, headers, ext map[string]string) *authv3.CheckRequest {
	h := map[string]string{":method": method, ":path": path, ":authority": "api.example", "user-agent": "test"}
	for k, v := range headers {
		h[k] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: peer("10.1.2.3", 40000),
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "1", Method: method, Path: path, Host: "api.example", Scheme: "http", Protocol: "HTTP/1.1", Headers: h,
		}},
		ContextExtensions: ext,
	}}
}

// denialBody is the JSON body of a denial (docs/api.md), as a client reads it.
type denialBody struct {
	Error      string `json:"error"`
	Key        string `json:"key"`
	Presented  string `json:"presented"`
	Current    string `json:"current"`
	DecisionID string `json:"decisionId"`
}
