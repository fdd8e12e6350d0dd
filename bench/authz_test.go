package bench

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/lockstore"
	redisstore "github.com/fencegate/fencegate/lockstore/redis"
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
// the real `fencegate serve` binary's ext_authz listener on the Redis store
// — a write carrying the current fence of a held lock, so every check reads
// Redis and allows — against the floor of a no-op Authorization server that
// answers OK at once, on a grpc.Server built as fencegate's, in its own
// process too. The clients stay in the bench process, so each server's CPU
// per check is its own process's (/proc/<pid>/stat), plus Redis's.
//
// The run fails when fencegate's ratios to the no-op floor, the medians
// over the rounds of each round's pair, miss -authz-min-ratio (checks/s)
// or -authz-max-cpu-ratio (server CPU per check): by default a guard
// against regressions below what b748ce7 measured on an idle machine
// (0.56–0.60×, 1.79–1.96×). Issue #27 item 2's targets (≥ 0.75×, ≤ 1.6×)
// are not met; the report names them, and passing -authz-min-ratio 0.75
// -authz-max-cpu-ratio 1.6 holds a run to them.
func BenchmarkExtAuthz(b *testing.B) {
	runSuite(b, authzSuite)
	checkRatios(b, board.snapshot(), "authz/fencegate-redis", "authz/noop", *authzMinRatio, *authzMaxCPURatio)
}

// The floors BenchmarkExtAuthz holds fencegate's ratios to (at 24735a4 it
// measured 0.62× and 1.70×, at 3b7ead8 and b748ce7 on an idle machine
// 0.56–0.60× and 1.79–1.96×; bench/results/2026-11-28-authz-route.md).
var (
	authzMinRatio    = flag.Float64("authz-min-ratio", 0.5, "BenchmarkExtAuthz fails below this checks/s ratio to the no-op server (median over rounds)")
	authzMaxCPURatio = flag.Float64("authz-max-cpu-ratio", 2.2, "BenchmarkExtAuthz fails above this server-CPU-per-check ratio to the no-op server (median over rounds)")
)

// checkRatios fails tb when sub's throughput ratio to base is below
// minRatio or its server CPU per call ratio above maxCPU: each the median
// of the per-round ratios (a subject and its baseline run back to back in
// a round). Without both subjects' runs (a -bench filter left one out)
// there is nothing to hold, and it says so.
func checkRatios(tb interface {
	Errorf(string, ...any)
	Logf(string, ...any)
}, runs map[string][]result, sub, base string, minRatio, maxCPU float64) {
	tp := paired(runs[sub], runs[base], ratioOf(perSec))
	cpu := paired(runs[sub], runs[base], ratioOf(serverCPU))
	if len(tp) == 0 {
		tb.Logf("%s ÷ %s: no paired runs; ratios not checked", sub, base)
		return
	}
	if m := median(tp); m < minRatio {
		tb.Errorf("%s: %.2f× %s's throughput (median of %d rounds, %.2f–%.2f); the floor is %.2f×", sub, m, base, len(tp), tp[0], tp[len(tp)-1], minRatio)
	}
	if m := median(cpu); m > maxCPU || m == 0 {
		tb.Errorf("%s: %.2f× %s's server CPU per call (median of %d rounds, %.2f–%.2f); the ceiling is %.2f×", sub, m, base, len(cpu), cpu[0], cpu[len(cpu)-1], maxCPU)
	}
}

// BenchmarkExtAuthzOpenLoop: the same two servers and requests, driven open
// loop — -open-rate checks per second (2,000 by default) started on
// schedule whatever the answers' latency — for p50, p99 and p999 at a rate
// a busy edge sees, rather than at saturation.
func BenchmarkExtAuthzOpenLoop(b *testing.B) { runOpenSuite(b, authzOpenSuite) }

// noopEnv makes the test binary, re-executed, serve the no-op
// Authorization server (see TestMain).
const noopEnv = "FENCEGATE_BENCH_NOOP_AUTHZ"

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

// runNoopAuthz is the floor's process: noopAuthz and a health service
// (SERVING, as authz.Server.Register sets it) on a grpc.Server with
// cmd/fencegate's options and connection cap, on loopback. It prints its
// address and serves until its stdin closes (the bench process exited or
// stopped it).
func runNoopAuthz() {
	lis, err := listenLoopback()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	g := grpc.NewServer(grpcServerOptions()...)
	authv3.RegisterAuthorizationServer(g, noopAuthz{})
	hs := health.NewServer()
	hs.SetServingStatus(authz.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	go func() { _ = g.Serve(lis) }()
	fmt.Printf("noop authz ready %s\n", lis.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	g.Stop()
	os.Exit(0)
}

// startNoopAuthz runs the floor's process: the bench binary re-executed.
func startNoopAuthz(tb testing.TB) *proc {
	tb.Helper()
	return startProc(tb, []string{noopEnv + "=1"}, func(line string) map[string]string {
		if a, ok := strings.CutPrefix(line, "noop authz ready "); ok {
			return map[string]string{"authz": a}
		}
		return nil
	}, os.Args[0], "-test.run=^$")
}

// serveDebugAddr, when set, opens the pprof listener of the `fencegate
// serve` child (the closed- and open-loop suites' children run one after
// the other, so they can share the address), so the server's own profile
// can be taken while the ext_authz benchmarks run.
var serveDebugAddr = flag.String("serve-debug-addr", "", "pprof listener of the ext_authz benchmark's `fencegate serve` child, e.g. 127.0.0.1:6060 (default off)")

// startFencegateServe runs `fencegate serve` on the Redis store under the
// bench store's prefix, with every listener of a deployment (lock API over
// HTTP and gRPC, ext_authz) on loopback, a token, JSON logs at info (as
// deploy/k8s/config.yaml has them) and the check timeout benchCheckTimeout.
// The store URL comes through FENCEGATE_STORE, as in the deployment.
func startFencegateServe(tb testing.TB, store *redisstore.Store) *proc {
	tb.Helper()
	return startFencegateServeURL(tb, redisStoreURL(tb, store))
}

// startFencegateServeURL is startFencegateServe on any store URL (a
// cluster's, say).
func startFencegateServeURL(tb testing.TB, storeURL string) *proc {
	tb.Helper()
	bin, err := fencegateBinary()
	if err != nil {
		tb.Fatal(err)
	}
	debug := ""
	if *serveDebugAddr != "" {
		debug = "debug:\n  addr: " + *serveDebugAddr + "\n"
	}
	cfg := writeServeConfig(tb, "127.0.0.1:0", benchCheckTimeout, debug)
	return startProc(tb, []string{"FENCEGATE_CONFIG=", "FENCEGATE_STORE=" + storeURL},
		readyJSON("fencegate ready"), bin, "serve", "--config", cfg)
}

// writeServeConfig writes a `fencegate serve` config and returns its path:
// the lock API over HTTP and gRPC on loopback, ext_authz on authzAddr
// ("off" for none), the bench token, JSON logs at info and check.timeout
// timeout; extra (more top-level sections) is appended.
func writeServeConfig(tb testing.TB, authzAddr string, timeout time.Duration, extra string) string {
	tb.Helper()
	sum := auth.HashToken(benchToken)
	cfg := filepath.Join(tb.TempDir(), "serve.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `http:
  addr: 127.0.0.1:0
grpc:
  addr: 127.0.0.1:0
authz:
  addr: %q
tokens:
  - name: bench
    sha256: %s
    prefixes: ["bench/"]
log:
  level: info
  format: json
check:
  timeout: %s
%s`, authzAddr, hex.EncodeToString(sum[:]), timeout, extra), 0o600); err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// authzSuite runs the no-op floor first, then fencegate.
func authzSuite(tb testing.TB, nw int) []subject { return authzSubjects(tb, nw, "authz") }

// authzOpenSuite is authzSuite under the open-loop ids.
func authzOpenSuite(tb testing.TB, nw int) []subject { return authzSubjects(tb, nw, "authz-open") }

// authzSubjects starts the no-op floor and `fencegate serve` over Redis,
// each in its own process, with ids under prefix; each is called over one
// client connection the workers share, as Envoy's would be. Both rows
// measure the same Redis, so the floor's shows what an idle Redis costs and
// fencegate's what its checks add.
func authzSubjects(tb testing.TB, nw int, prefix string) []subject {
	store := openRedis(tb)
	reqs, _ := heldWrites(tb, store, nw)
	noop := startNoopAuthz(tb)
	fg := startFencegateServe(tb, store)
	return []subject{
		{id: prefix + "/noop", unit: "checks/s", redis: store.Client(), server: noop.pids,
			op: checkOp(authv3.NewAuthorizationClient(dialGRPC(tb, noop.addr["authz"])), reqs)},
		{id: prefix + "/fencegate-redis", unit: "checks/s", redis: store.Client(), server: fg.pids,
			op: checkOp(authv3.NewAuthorizationClient(dialGRPC(tb, fg.addr["authz"])), reqs)},
	}
}

// heldWrites acquires one lock per worker (released at cleanup) and builds,
// per worker, the CheckRequest Envoy would send for a POST carrying that
// lock's key and current fence. It returns the requests and the locks.
func heldWrites(tb testing.TB, store lockstore.Store, nw int) ([]*authv3.CheckRequest, []lockstore.AcquireResult) {
	tb.Helper()
	keys := workerKeys("authz", nw)
	held := holdWorkerLocks(tb, store, keys)
	reqs := make([]*authv3.CheckRequest, nw)
	for w, a := range held {
		reqs[w] = envoyWrite(fmt.Sprintf("/orders/%d", w), keys[w], a.Fence)
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
				fencewire.HeaderKey: key, fencewire.HeaderToken: fence,
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
