package serving

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/fencegate/fencegate/internal/connlimit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
)

// panicStore is the real store with IsLocked sabotaged, to reach the
// recovery path, which no correct handler takes.
type panicStore struct{ lockstore.Store }

func (panicStore) IsLocked(context.Context, string) (bool, error) { panic("boom") }

func panickingAPI(t *testing.T) (*lockserver.Server, *testutil.LogBuffer, *slog.Logger) {
	t.Helper()
	s := locktest.OpenBolt(t)
	logs := &testutil.LogBuffer{}
	log := testutil.Logger(logs, nil)
	srv, err := lockserver.New(lockserver.Options{Store: panicStore{s}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return srv, logs, log
}

// TestHTTPPanicIsRecoveredByTheListener: a panicking lock API handler is a
// 500 with the lock API's Internal error body, logged with its stack and
// counted in the access log as a 500; the listener keeps serving. A
// handler of no package (forward-auth, the webhook) gets a bare 500.
func TestHTTPPanicIsRecoveredByTheListener(t *testing.T) {
	srv, logs, log := panickingAPI(t)
	mux := http.NewServeMux()
	srv.Register(mux)
	mux.HandleFunc("/bare", func(http.ResponseWriter, *http.Request) { panic("bare boom") })
	mux.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {}) // does the listener still serve?
	r, err := NewHTTP("http", "127.0.0.1:0", nil, mux, time.Minute, connlimit.Limits{}, log)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.Serve() }()
	t.Cleanup(func() { r.srv.Close() })
	base := "http://" + r.Addr()

	res, err := http.Get(base + "/v1/locks/status?key=a")
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	err = json.NewDecoder(res.Body).Decode(&body)
	res.Body.Close()
	if res.StatusCode != 500 || err != nil || body.Error.Code != string(lockstore.Internal) {
		t.Fatalf("status %d, code %q (%v)", res.StatusCode, body.Error.Code, err)
	}
	for _, want := range []string{"panic in HTTP handler", "boom", "stack=", "status=500"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}

	res, err = http.Get(base + "/bare")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 500 || !strings.Contains(string(b), "internal error") {
		t.Fatalf("bare handler: %d %q", res.StatusCode, b)
	}

	res, err = http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("healthz after panics: %d", res.StatusCode)
	}
}

// TestGRPCPanicIsRecoveredByTheListener: a panicking lock API method is
// INTERNAL with the ErrorInfo code Internal, logged with its stack; the
// listener keeps serving.
func TestGRPCPanicIsRecoveredByTheListener(t *testing.T) {
	srv, logs, log := panickingAPI(t)
	r, err := NewGRPC("grpc", "127.0.0.1:0", nil, DefaultGRPCLimits, log, func(g *grpc.Server) {
		srv.RegisterGRPC(g)
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Serve() }()
	t.Cleanup(func() { r.srv.Stop(); <-done })

	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := fencegatev1.NewLocksClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.IsLocked(ctx, &fencegatev1.IsLockedRequest{Key: "a"})
	st, _ := status.FromError(err)
	if st.Code() != codes.Internal || lockserver.CodeFromStatus(st) != lockstore.Internal {
		t.Fatalf("error %v, want INTERNAL with code Internal", err)
	}
	for _, want := range []string{"panic in gRPC handler", "boom", "stack=", "code=Internal"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if res, err := c.Acquire(ctx, &fencegatev1.AcquireRequest{Key: "a"}); err != nil || !res.GetOk() {
		t.Fatalf("server broken after a panic: %v %v", res, err)
	}
}
