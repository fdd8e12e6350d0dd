package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/api/wire"
	"github.com/fencegate/fencegate/lockserver"
)

// The transport floors of BenchmarkGateway: servers that answer the lock
// API's acquire and release with valid canned replies, with no store,
// authentication, metrics, access log or any other fencegate logic, on the
// same listeners as the gateway (listen_test.go). The client package
// drives them exactly as it drives the gateway, so a floor's cycles/s is
// what the transport alone (client, HTTP/1.1+JSON or HTTP/2+protobuf,
// loopback, server stack) reaches.

// The canned lock: a lockId and fence in the wire's formats (22 base64url
// characters; 15 digits), which the client validates.
const (
	cannedLockID  = "AAAAAAAAAAAAAAAAAAAAAA"
	cannedFence   = "000000000000001"
	cannedExpires = int64(4102444800000) // 2100-01-01
)

// transportFloorHTTP is the HTTP floor's handler: it decodes the JSON body
// (the codec is part of the transport) and writes a canned reply.
func transportFloorHTTP() http.Handler {
	reply := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return b
	}
	acquired := reply(wire.AcquireReply{OK: true, LockID: cannedLockID, Fence: cannedFence, ExpiresAtMs: cannedExpires})
	released := reply(wire.OKReply{OK: true})
	mux := http.NewServeMux()
	mux.Handle("POST "+wire.PathAcquire, cannedReply[wire.AcquireRequest](acquired))
	mux.Handle("POST "+wire.PathRelease, cannedReply[wire.ReleaseRequest](released))
	return mux
}

// cannedReply decodes the body as a Req, as a server must, and answers out.
func cannedReply[Req any](out []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, lockserver.MaxBodyBytes)).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}
}

// transportFloorGRPC is the gRPC floor's Locks service: canned replies.
type transportFloorGRPC struct {
	fencegatev1.UnimplementedLocksServer
}

func (transportFloorGRPC) Acquire(context.Context, *fencegatev1.AcquireRequest) (*fencegatev1.AcquireResponse, error) {
	return &fencegatev1.AcquireResponse{Ok: true, LockId: cannedLockID, Fence: cannedFence, ExpiresAtMs: cannedExpires}, nil
}

func (transportFloorGRPC) Release(context.Context, *fencegatev1.ReleaseRequest) (*fencegatev1.ReleaseResponse, error) {
	return &fencegatev1.ReleaseResponse{Ok: true}, nil
}

// startTransportFloors serves both floors in process, as the gateway's
// servers are, and returns a client for each (the same client options as
// the gateway's).
func startTransportFloors(tb testing.TB, nw int) gateway {
	tb.Helper()
	return gateway{
		http: httpClient(tb, serveHTTP(tb, transportFloorHTTP()), nw),
		grpc: grpcClient(tb, listenGRPC(tb, func(g *grpc.Server) {
			fencegatev1.RegisterLocksServer(g, transportFloorGRPC{})
			// As cmd/fencegate's lock API listener has.
			healthpb.RegisterHealthServer(g, health.NewServer())
		})),
	}
}
