package client_test

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/writeproof"
)

const token = "fg_test_token"

// gatewayEnv is one real lockserver.Server over a real bolt store, serving the
// lock API on a loopback HTTP listener and a loopback gRPC listener.
type gatewayEnv struct {
	httpURL  string
	grpcAddr string
	store    lockstore.Store
}

type gatewayConfig struct {
	tls      *tls.Config                           // serve both listeners with TLS
	wrap     func(lockstore.Store) lockstore.Store // what the server sees of the store
	grpcOpts []grpc.ServerOption                   // e.g. a broken server's interceptor
	proofs   *writeproof.Signer                    // signs write proofs at acquire
	// connState, if set, sees the HTTP listener's connection state changes.
	connState func(net.Conn, http.ConnState)
}

func gateway(t *testing.T) *gatewayEnv { return gatewayWith(t, gatewayConfig{}) }

func gatewayWith(t *testing.T, cfg gatewayConfig) *gatewayEnv {
	t.Helper()
	store := locktest.OpenBolt(t)
	authn, err := auth.NewAuthenticator([]auth.Token{
		{Name: "all", SHA256: auth.HashToken(token), Operations: []string{"*"}},
		{Name: "orders-only", SHA256: auth.HashToken("orders"), Prefixes: []string{"orders/"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var served lockstore.Store = store
	if cfg.wrap != nil {
		served = cfg.wrap(store)
	}
	srv, err := lockserver.New(lockserver.Options{Store: served, Audit: store, Auth: authn, Proofs: cfg.proofs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}

	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.ConnState = cfg.connState
	if cfg.tls != nil {
		ts.TLS = cfg.tls
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)

	gopts := cfg.grpcOpts
	if cfg.tls != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(cfg.tls)))
	}
	gs := grpc.NewServer(gopts...)
	srv.RegisterGRPC(gs)
	lis := testutil.Listen(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() { gs.Stop(); <-done })
	return &gatewayEnv{httpURL: ts.URL, grpcAddr: lis.Addr().String(), store: store}
}

// kind is one of the two clients; every behaviour test runs against both,
// which is what proves they behave the same.
type kind struct {
	name string
	// addr is the gateway's address in the form this client takes.
	addr func(g *gatewayEnv) string
	// hostPort turns a bare host:port into that form.
	hostPort func(hp string) string
	// dial builds a client; the test closes it.
	dial func(addr string, opts ...client.Option) (client.Locks, error)
	// status is the transport's own answer in an error's cause (HTTP
	// status, gRPC status code), "" if there is none.
	status func(err error) string
}

var kinds = []kind{
	{
		name:     "http",
		addr:     func(g *gatewayEnv) string { return g.httpURL },
		hostPort: func(hp string) string { return "http://" + hp },
		dial: func(addr string, opts ...client.Option) (client.Locks, error) {
			return client.New(addr, opts...)
		},
		status: func(err error) string {
			var se *client.HTTPStatusError
			if errors.As(err, &se) {
				return strconv.Itoa(se.StatusCode)
			}
			return ""
		},
	},
	{
		name:     "grpc",
		addr:     func(g *gatewayEnv) string { return g.grpcAddr },
		hostPort: func(hp string) string { return hp },
		dial: func(addr string, opts ...client.Option) (client.Locks, error) {
			return client.NewGRPC(addr, opts...)
		},
		status: func(err error) string {
			if st, ok := status.FromError(err); ok && err != nil {
				return st.Code().String()
			}
			return ""
		},
	},
}

// forEachKind runs f as a subtest per client kind.
func forEachKind(t *testing.T, f func(t *testing.T, k kind)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { f(t, k) })
	}
}

// client builds a client of kind k for addr, with token tok if not empty,
// closed when the test ends.
func (k kind) client(t *testing.T, addr, tok string, opts ...client.Option) client.Locks {
	t.Helper()
	if tok != "" {
		opts = append([]client.Option{client.WithToken(tok)}, opts...)
	}
	c, err := k.dial(addr, opts...)
	if err != nil {
		t.Fatalf("%s client for %s: %v", k.name, addr, err)
	}
	if cl, ok := c.(io.Closer); ok {
		t.Cleanup(func() { _ = cl.Close() })
	}
	return c
}

// silentListener accepts connections and never answers on them: a gateway
// that hangs.
func silentListener(t *testing.T) string {
	t.Helper()
	lis := testutil.Listen(t)
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return lis.Addr().String()
}
