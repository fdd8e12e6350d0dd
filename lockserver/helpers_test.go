package lockserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
)

// Tokens used across the tests. Their secrets must never show up in logs.
const (
	adminToken  = "tok-admin-3f1c9a7e"   // every key, every operation incl. audit
	ordersToken = "tok-orders-8d2b41f0"  // keys under "orders/", lock operations
	readerToken = "tok-reader-55e07c2d"  // every key, status and lookup only
	unknownTok  = "tok-unknown-00000000" // not configured
)

func testAuthenticator(t testing.TB) *auth.Authenticator {
	t.Helper()
	a, err := auth.NewAuthenticator([]auth.Token{
		{Name: "admin", SHA256: auth.HashToken(adminToken), Prefixes: []string{"*"}, Operations: []string{"*"}},
		{Name: "orders", SHA256: auth.HashToken(ordersToken), Prefixes: []string{"orders/"}},
		{Name: "reader", SHA256: auth.HashToken(readerToken), Operations: []string{"status", "lookup"}},
	})
	if err != nil {
		t.Fatalf("NewAuthenticator: %v", err)
	}
	return a
}

// env is one lockserver.Server over a store, served over real HTTP.
type env struct {
	srv  *lockserver.Server
	http *httptest.Server
	reg  *prometheus.Registry
	logs *testutil.LogBuffer
}

// newEnv builds a Server over store; mutate adjusts the options first.
func newEnv(t testing.TB, store lockstore.Store, mutate func(*lockserver.Options)) *env {
	t.Helper()
	e := &env{reg: prometheus.NewRegistry(), logs: &testutil.LogBuffer{}}
	o := lockserver.Options{
		Store:      store,
		Auth:       testAuthenticator(t),
		MaxWait:    5 * time.Second,
		Registerer: e.reg,
		Gatherer:   e.reg,
		Logger:     slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		// Every request logged, so the tests that scan logs for secrets see every line.
		AccessLog: lockserver.AccessAll,
	}
	if al, ok := store.(lockstore.AuditLog); ok {
		o.Audit = al
	}
	if mutate != nil {
		mutate(&o)
	}
	srv, err := lockserver.New(o)
	if err != nil {
		t.Fatalf("lockserver.New: %v", err)
	}
	e.srv = srv
	e.http = httptest.NewServer(srv.Handler())
	t.Cleanup(e.http.Close)
	return e
}

// reply is a decoded HTTP answer.
type reply struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

// errCode is the error.code of an error body ("" if none).
func (r reply) errCode() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (r reply) str(field string) string {
	s, _ := r.body[field].(string)
	return s
}

func (r reply) num(field string) int64 {
	f, _ := r.body[field].(float64)
	return int64(f)
}

// do sends one request. body is sent raw; contentType "" omits the header.
func (e *env) do(t *testing.T, ctx context.Context, method, path, token, contentType, body string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, e.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: reply is not JSON: %v: %q", method, path, err, raw)
		}
	}
	return r
}

// post sends a JSON body.
func (e *env) post(t *testing.T, path, token string, body any) reply {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return e.do(t, context.Background(), http.MethodPost, path, token, "application/json", string(b))
}

// acquire takes key with the admin token and returns lockId and fence.
func (e *env) acquire(t *testing.T, key string, ttlMs int64) (lockID, fence string) {
	t.Helper()
	r := e.post(t, "/v1/locks/acquire", adminToken, map[string]any{"key": key, "ttlMs": ttlMs})
	if r.status != http.StatusOK {
		t.Fatalf("acquire %q: status %d %s", key, r.status, r.raw)
	}
	return r.str("lockId"), r.str("fence")
}

// counter reads fencegate_lock_ops_total{op,result}.
func (e *env) counter(t *testing.T, op, result string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fencegate_lock_ops_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if got["op"] == op && got["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// assertNoSecrets fails if the logs contain any of the given strings.
func assertNoSecrets(t *testing.T, logs string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(logs, s) {
			t.Errorf("logs contain the secret %q", s)
		}
	}
}
