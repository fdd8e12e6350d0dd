package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fenceguard"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/writeproof"
)

func databaseURL(t *testing.T) string {
	t.Helper()
	return testutil.DatabaseURL(t)
}

// TestRunScript runs the README's one command (run.sh --demo: PostgreSQL,
// fencegate, the proxy, nginx and this API) and checks every step of the
// demo answered as expected, through both edges.
func TestRunScript(t *testing.T) {
	databaseURL(t)
	testutil.NeedService(t, "nginx")
	if _, err := exec.LookPath("nginx"); err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			t.Fatalf("nginx not found: the example's nginx half needs it (apt-get install -y nginx)")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./run.sh", "--demo")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "every step answered as expected") {
		t.Fatalf("run.sh --demo: %v\n%s", err, out)
	}
	for _, want := range []string{"A writes through the proxy", "A writes through the nginx", "the API refused it"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("run.sh output lacks %q:\n%s", want, out)
		}
	}
}

// TestServer drives the API in-process: writes are refused as the edge
// refuses them, bodies are bounded, and late (async) commits under an
// older fence are refused.
func TestServer(t *testing.T) {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, databaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	table := "orders_test_" + hex.EncodeToString(b)
	defer func() { _, _ = db.Exec(ctx, `DROP TABLE IF EXISTS `+table+`, `+table+`_fences`) }()
	signer, err := writeproof.NewSigner([]writeproof.Key{{KID: "k1", Seed: bytes.Repeat([]byte{3}, ed25519.SeedSize)}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(ctx, db, config{Table: table, Proofs: fenceguard.StaticKeys(signer.Verifier()),
		QueueDelay: 300 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer s.Close()
	defer ts.Close()

	put := func(path, fence, body string, async bool) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, ts.URL+path, strings.NewReader(body))
		if fence != "" {
			req.Header.Set("X-Fence-Verified", fence)
			key := "orders/" + strings.TrimPrefix(path, "/orders/")
			p, err := signer.Sign(key, fence, "p8s1m66P1k_mBCcoO-Qe2Q")
			if err == nil {
				req.Header.Set("X-Fence-Proof", p)
			}
		}
		if async {
			req.Header.Set("Prefer", "respond-async")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	const f5, f7, f9 = "000000000000005", "000000000000007", "000000000000009"
	for _, c := range []struct {
		what, path, fence, body string
		status                  int
		reason                  string
	}{
		{"first write", "/orders/1", f7, `{"item":"tea","qty":1}`, 200, ""},
		{"same fence again", "/orders/1", f7, `{"item":"tea","qty":2}`, 200, ""},
		{"older fence", "/orders/1", f5, `{"item":"tea","qty":3}`, 409, "stale"},
		{"no fence", "/orders/1", "", `{"item":"tea","qty":3}`, 428, "missing"},
		{"non-canonical id", "/orders/01", f7, `{"item":"tea","qty":3}`, 400, "malformed"},
		{"unknown field", "/orders/1", f7, `{"item":"tea","qty":3,"price":1}`, 400, ""},
		{"qty out of range", "/orders/1", f7, `{"item":"tea","qty":0}`, 400, ""},
		{"item too long", "/orders/1", f7, `{"item":"` + strings.Repeat("x", maxItem+1) + `","qty":1}`, 400, ""},
		{"body too large", "/orders/1", f7, `{"item":"` + strings.Repeat("x", maxBody) + `","qty":1}`, 400, ""},
	} {
		status, m := put(c.path, c.fence, c.body, false)
		if status != c.status || c.reason != "" && m["error"] != c.reason {
			t.Errorf("%s: %d %v, want %d %s", c.what, status, m, c.status, c.reason)
		}
	}
	// A write queued under 7 commits after one under 9: refused, and its
	// job says so.
	status, m := put("/orders/1", f7, `{"item":"late","qty":1}`, true)
	if status != http.StatusAccepted {
		t.Fatalf("async: %d %v", status, m)
	}
	if status, _ := put("/orders/1", f9, `{"item":"coffee","qty":9}`, false); status != 200 {
		t.Fatalf("write under 9: %d", status)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(ts.URL + "/jobs/" + m["job"].(string))
		if err != nil {
			t.Fatal(err)
		}
		var out outcome
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if out.State != "pending" {
			if out.State != "refused" || out.Reason != "stale" || out.Current != f9 {
				t.Fatalf("late write's job: %+v, want refused stale, current %s", out, f9)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("job still pending after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get(ts.URL + "/orders/1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var o map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&o)
	if o["item"] != "coffee" || o["fence"] != f9 {
		t.Errorf("order: %v, want the fence-9 write", o)
	}
}
