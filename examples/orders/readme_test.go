package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fenceguard"
	"github.com/fencegate/fencegate/fenceguard/pgfence"
	"github.com/fencegate/fencegate/writeproof"
)

// registerOrders is the README's "five lines", compiled and run here
// (TestREADMESnippet); the full service is server.go.
func registerOrders(mux *http.ServeMux, db *pgxpool.Pool, gateway string, fences pgfence.Table) {
	// README:begin
	guard := fenceguard.New(fenceguard.Options{Key: orderKey, Proofs: fenceguard.NewKeySet(gateway+"/v1/proof/keys", fenceguard.KeySetOptions{})})
	mux.Handle("PUT /orders/{id}", guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, _ := fenceguard.FromContext(r.Context()) // the key and the fence the edge verified, the proof checked
		res, err := fences.Commit(r.Context(), db, f.Key, f.Fence, func(tx pgx.Tx) error {
			_, err := tx.Exec(r.Context(), `UPDATE orders SET qty = qty + 1 WHERE id = $1`, r.PathValue("id")) // your write, in the same transaction
			return err
		})
		if err == nil && !res.Applied {
			fenceguard.RefuseStale(w, r, res) // 409 stale, the edge's body, naming the newer fence
			return
		}
		// ... answer as before (err: 503)
	})))
	// README:end
}

// TestREADMESnippet: the README shows registerOrders's region character
// for character, and it works: a lower fence than one committed is 409.
func TestREADMESnippet(t *testing.T) {
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), "// README:"+"begin\n")
	region, _, ok := strings.Cut(rest, "\t// README:"+"end\n")
	if !ok {
		t.Fatal("no README region")
	}
	want := strings.ReplaceAll(region, "\n\t", "\n")
	want = strings.TrimPrefix(want, "\t")
	for _, doc := range []string{"README.md", "../../README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		_, after, ok := strings.Cut(string(b), "<!-- examples/orders/readme_test.go -->\n```go\n")
		got, _, ok2 := strings.Cut(after, "```\n")
		if !ok || !ok2 {
			t.Fatalf("%s has no block marked <!-- examples/orders/readme_test.go -->", doc)
		}
		if strings.TrimSpace(got) != strings.TrimSpace(want) {
			t.Errorf("%s's snippet differs from readme_test.go's region:\n--- %s\n%s\n--- region\n%s", doc, doc, got, want)
		}
	}

	// Run it: a gateway whose key set is never needed (proofs are
	// checked before the commit; here a stand-in serves one key).
	ctx := context.Background()
	db, err := pgxpool.New(ctx, databaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	fences := pgfence.Table{Name: "readme_" + hex.EncodeToString(b) + "_fences"}
	defer func() { _, _ = db.Exec(ctx, `DROP TABLE IF EXISTS `+fences.Name) }()
	if err := fences.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	// The snippet updates "orders": a temporary table of that name
	// shadows any real one for this connection pool's sessions only, so
	// use a pool of one connection.
	cfg := db.Config()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if _, err := one.Exec(ctx, `CREATE TEMP TABLE orders (id bigint PRIMARY KEY, qty int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := one.Exec(ctx, `INSERT INTO orders VALUES (42, 0)`); err != nil {
		t.Fatal(err)
	}
	signer, gateway := standInGateway(t)
	mux := http.NewServeMux()
	registerOrders(mux, one, gateway.URL, fences)
	put := func(fence string) (int, string) {
		proof, _ := signer.Sign("orders/42", fence, "p8s1m66P1k_mBCcoO-Qe2Q")
		r := httptest.NewRequest(http.MethodPut, "/orders/42", nil)
		r.Header.Set("X-Fence-Verified", fence)
		r.Header.Set("X-Fence-Proof", proof)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		var body map[string]string
		_ = json.Unmarshal(w.Body.Bytes(), &body)
		return w.Code, body["current"]
	}
	if code, _ := put("000000000000008"); code != 200 {
		t.Fatalf("fence 8: %d", code)
	}
	if code, cur := put("000000000000007"); code != 409 || cur != "000000000000008" {
		t.Fatalf("fence 7 after 8: %d current %q, want 409 naming 8", code, cur)
	}
	var qty int
	if err := one.QueryRow(ctx, `SELECT qty FROM orders WHERE id = 42`).Scan(&qty); err != nil || qty != 1 {
		t.Fatalf("qty %d (%v), want 1: only the fence-8 write committed", qty, err)
	}
}

// standInGateway serves one proof key at /v1/proof/keys, as fencegate does.
func standInGateway(t *testing.T) (*writeproof.Signer, *httptest.Server) {
	t.Helper()
	signer, err := writeproof.NewSigner([]writeproof.Key{{KID: "k1", Seed: bytes.Repeat([]byte{5}, ed25519.SeedSize)}})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/proof/keys" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(signer.Verifier().KeySet())
	}))
	t.Cleanup(gw.Close)
	return signer, gw
}
