package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/lockstore"
)

// TestAuth runs a gateway with two bearer tokens from a YAML config: one
// for lock operations on orders/, one for the audit trail only.
func TestAuth(t *testing.T) {
	t.Parallel()
	lockTok, auditTok := "lk_"+randHex(16), "au_"+randHex(16)
	cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
	writeFile(t, cfg, fmt.Sprintf(`tokens:
  - name: orders-worker
    sha256: %s
    prefixes: ["orders/"]
  - name: auditor
    sha256: %s
    operations: [audit]
`, sha256Hex(lockTok), sha256Hex(auditTok)))
	g := StartGateway(t, "bolt://"+filepath.Join(t.TempDir(), "auth.db"), "--config", cfg)
	base := g.URL()
	if !strings.Contains(g.Logs(), `"auth":"on"`) {
		t.Errorf("ready line does not say auth is on")
	}

	t.Run("http", func(t *testing.T) {
		cases := []struct {
			name   string
			call   Call
			status int
		}{
			{"no token", Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"orders/1"}`}, 401},
			{"wrong token", Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"orders/1"}`, Token: "lk_" + randHex(16)}, 401},
			{"not a bearer credential", Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"orders/1"}`,
				Header: map[string][]string{"Authorization": {"Basic " + lockTok}}}, 401},
			{"no token, bad body", Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"nope":`}, 401},
			{"key outside the prefix", Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"billing/1"}`, Token: lockTok}, 403},
			{"status outside the prefix", Call{Method: "GET", Path: "/v1/locks/status?key=billing/1", Token: lockTok}, 403},
			{"lookup outside the prefix", Call{Method: "POST", Path: "/v1/locks/lookup", Body: `{"key":"billing/1"}`, Token: lockTok}, 403},
			{"audit with the lock token", Call{Method: "GET", Path: "/v1/audit", Token: lockTok}, 403},
			{"audit by key with the lock token", Call{Method: "GET", Path: "/v1/audit?key=orders/1", Token: lockTok}, 403},
			{"acquire with the audit token", Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"orders/1"}`, Token: auditTok}, 403},
			{"audit without a token", Call{Method: "GET", Path: "/v1/audit"}, 401},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := Do(t, base, c.call)
				if r.Status != c.status {
					t.Fatalf("status = %d %s, want %d", r.Status, r.Body, c.status)
				}
				wantError(t, r, lockstore.AuthFailed)
				if www := r.Header.Get("WWW-Authenticate"); !strings.HasPrefix(www, "Bearer") {
					t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", www)
				}
			})
		}

		a := Do(t, base, Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"orders/1"}`, Token: lockTok})
		if a.Status != 200 || a.JSON["ok"] != true {
			t.Fatalf("acquire orders/1 with the lock token = %d %s", a.Status, a.Body)
		}
		if r := Do(t, base, Call{Method: "GET", Path: "/v1/locks/status?key=orders/1", Token: lockTok}); r.Status != 200 || r.JSON["locked"] != true {
			t.Errorf("status orders/1 with the lock token = %d %s", r.Status, r.Body)
		}
		if r := Do(t, base, Call{Method: "GET", Path: "/v1/audit", Token: auditTok}); r.Status != 200 || r.JSON["events"] == nil {
			t.Errorf("audit with the audit token = %d %s", r.Status, r.Body)
		}
		// The lockId is the capability for release: no prefix check, but
		// still a token.
		rel := fmt.Sprintf(`{"lockId":%q}`, a.JSON["lockId"])
		if r := Do(t, base, Call{Method: "POST", Path: "/v1/locks/release", Body: rel}); r.Status != 401 {
			t.Errorf("release without a token = %d %s", r.Status, r.Body)
		}
		if r := Do(t, base, Call{Method: "POST", Path: "/v1/locks/release", Body: rel, Token: lockTok}); r.Status != 200 {
			t.Errorf("release with the lock token = %d %s", r.Status, r.Body)
		}
		// Operations endpoints stay open for probes.
		if r := Do(t, base, Call{Method: "GET", Path: "/healthz"}); r.Status != 200 {
			t.Errorf("/healthz without a token = %d", r.Status)
		}
	})

	t.Run("grpc", func(t *testing.T) {
		c := fencegatev1.NewLocksClient(dialGRPC(t, g.GRPC))
		with := func(tok string) context.Context {
			ctx := rpcCtx(t)
			if tok == "" {
				return ctx
			}
			return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
		}
		acquire := func(tok, key string) error {
			_, err := c.Acquire(with(tok), &fencegatev1.AcquireRequest{Key: key})
			return err
		}
		wantGRPCError(t, acquire("", "orders/2"), codes.Unauthenticated, lockstore.AuthFailed)
		wantGRPCError(t, acquire("lk_"+randHex(16), "orders/2"), codes.Unauthenticated, lockstore.AuthFailed)
		wantGRPCError(t, acquire(lockTok, "billing/2"), codes.PermissionDenied, lockstore.AuthFailed)
		wantGRPCError(t, acquire(auditTok, "orders/2"), codes.PermissionDenied, lockstore.AuthFailed)
		_, err := c.IsLocked(with(lockTok), &fencegatev1.IsLockedRequest{Key: "billing/2"})
		wantGRPCError(t, err, codes.PermissionDenied, lockstore.AuthFailed)

		r, err := c.Acquire(with(lockTok), &fencegatev1.AcquireRequest{Key: "orders/2"})
		if err != nil || !r.GetOk() {
			t.Fatalf("Acquire orders/2 with the lock token = %v, %v", r, err)
		}
		if rel, err := c.Release(with(lockTok), &fencegatev1.ReleaseRequest{LockId: r.GetLockId()}); err != nil || !rel.GetOk() {
			t.Errorf("Release with the lock token = %v, %v", rel, err)
		}
	})

	// Logs name the token, never its secret.
	g.Stop(t)
	logs := g.Logs()
	for _, secret := range []string{lockTok, auditTok} {
		if strings.Contains(logs, secret) {
			t.Errorf("gateway log contains a bearer token")
		}
	}
	if !strings.Contains(logs, "orders-worker") {
		t.Errorf("access log does not name the token orders-worker")
	}
}

// TestInsecureListen: the lock API on a non-loopback address without
// tokens is refused (exit 2, pointing at --insecure), and --insecure
// allows it.
func TestInsecureListen(t *testing.T) {
	t.Parallel()
	db := "bolt://" + filepath.Join(t.TempDir(), "insecure.db")
	res := runFencegate(t, 20*time.Second, nil, "serve", "--store", db,
		"--http-addr", "0.0.0.0:0", "--grpc-addr", "127.0.0.1:0", "--authz-addr", "off")
	if res.code != 2 {
		t.Fatalf("serve on 0.0.0.0 without tokens: exit %d, want 2\n%s", res.code, res.stderr)
	}
	if !strings.Contains(res.stderr, "--insecure") || !strings.Contains(res.stderr, "0.0.0.0") {
		t.Errorf("refusal does not name the address and --insecure:\n%s", res.stderr)
	}
	// The same for gRPC.
	res = runFencegate(t, 20*time.Second, nil, "serve", "--store", db,
		"--http-addr", "127.0.0.1:0", "--grpc-addr", "0.0.0.0:0", "--authz-addr", "off")
	if res.code != 2 || !strings.Contains(res.stderr, "grpc.addr") {
		t.Errorf("serve with gRPC on 0.0.0.0 without tokens: exit %d\n%s", res.code, res.stderr)
	}

	// With --insecure it serves (briefly: it is reachable beyond loopback).
	g := StartGateway(t, db, "--http-addr", "0.0.0.0:0", "--grpc-addr", "127.0.0.1:0", "--authz-addr", "off", "--insecure")
	_, port, _ := strings.Cut(g.HTTP[strings.LastIndex(g.HTTP, ":"):], ":")
	local := "http://127.0.0.1:" + port
	if r := Do(t, local, Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"open/1"}`}); r.Status != 200 {
		t.Errorf("acquire on the insecure gateway = %d %s", r.Status, r.Body)
	}
	g.Stop(t)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
