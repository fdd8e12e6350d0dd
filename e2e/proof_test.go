package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/writeproof"
)

// proofGateway starts a bolt gateway whose config lists the proof keys
// kids (each from a seed file in dir) and extra YAML.
func proofGateway(t *testing.T, db, dir string, kids []string, extra string) *Gateway {
	t.Helper()
	var b strings.Builder
	b.WriteString(extra + "\nproof:\n  keys:\n")
	for _, kid := range kids {
		fmt.Fprintf(&b, "    - {kid: %s, privateKeyFile: %s}\n", kid, filepath.Join(dir, kid+".seed"))
	}
	cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
	writeFile(t, cfg, b.String())
	return StartGateway(t, "bolt://"+db, "--config", cfg, "--admission-addr", "off")
}

// fwdCheck asks a gateway's forward-auth endpoint about PUT uri on the
// route orders/{2:int} with the given proof mode, as Caddy/Traefik would.
func fwdCheck(t *testing.T, g *Gateway, proofMode, uri, fence, proof string) Reply {
	t.Helper()
	h := http.Header{"X-Forwarded-Method": {"PUT"}, "X-Forwarded-Uri": {uri}}
	if fence != "" {
		h.Set("X-Fence-Token", fence)
	}
	if proof != "" {
		h.Set("X-Fence-Proof", proof)
	}
	// A client-supplied route header must not lower the route's mode.
	h.Set("X-Fence-Route-Proof", "none")
	return Do(t, g.URL(), Call{Method: "GET", Path: "/v1/authz/check?fence_key=orders/%7B2:int%7D&fence_route=orders&fence_proof=" + proofMode, Header: h})
}

func wantCheck(t *testing.T, what string, r Reply, status int, reason string) {
	t.Helper()
	if r.Status != status || r.Header.Get("X-Fence-Reason") != reason {
		t.Fatalf("%s: %d %q %s, want %d %q", what, r.Status, r.Header.Get("X-Fence-Reason"), r.Body, status, reason)
	}
}

type proofLock struct {
	LockID, Fence, Proof string
}

func acquireProof(t *testing.T, g *Gateway, key string) proofLock {
	t.Helper()
	r := post(t, g.URL(), "/v1/locks/acquire", `{"key":%q,"ttlMs":300000}`, key)
	var a proofLock
	if r.Status != 200 || json.Unmarshal(r.Body, &a) != nil || a.Proof == "" {
		t.Fatalf("acquire %s: %d %s", key, r.Status, r.Body)
	}
	return a
}

func keySet(t *testing.T, g *Gateway) (*writeproof.Verifier, []string) {
	t.Helper()
	r := Do(t, g.URL(), Call{Method: "GET", Path: "/v1/proof/keys"})
	if r.Status != 200 {
		t.Fatalf("GET /v1/proof/keys: %d %s", r.Status, r.Body)
	}
	v, err := writeproof.ReadKeySet(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("key set %s: %v", r.Body, err)
	}
	var ks writeproof.KeySet
	_ = json.Unmarshal(r.Body, &ks)
	var kids []string
	for _, k := range ks.Keys {
		kids = append(kids, k.KID)
	}
	return v, kids
}

// TestProofSignedRoute runs the binary with proof keys: a fence read from
// a denial and replayed without a proof is refused on a signed route (and
// passes on an ordinary one: the weakness the proof closes), the holder's
// proof passes, a proof for another key or an older fence is refused, on
// forward-auth and ext_authz alike; the gRPC lock API and `lock run` hand
// the proof out; the published keys verify it offline.
func TestProofSignedRoute(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, kid := range []string{"k-old"} {
		res := runFencegate(t, 30*time.Second, nil, "proofkey", "--kid", kid, "--out", filepath.Join(dir, kid+".seed"))
		if res.code != 0 || !strings.Contains(res.stdout, "privateKeyFile: "+filepath.Join(dir, kid+".seed")) {
			t.Fatalf("proofkey: %d\n%s%s", res.code, res.stdout, res.stderr)
		}
	}
	g := proofGateway(t, filepath.Join(t.TempDir(), "p.db"), dir, []string{"k-old"}, "")
	v, kids := keySet(t, g)
	if len(kids) != 1 || kids[0] != "k-old" {
		t.Fatalf("key set kids %v", kids)
	}

	a := acquireProof(t, g, "orders/42")
	if !strings.HasPrefix(a.Proof, "v1.k-old.") {
		t.Fatalf("proof %q", a.Proof)
	}
	if _, err := v.Verify(a.Proof, "orders/42", a.Fence); err != nil {
		t.Fatalf("offline verification of the acquire's proof: %v", err)
	}
	if strings.Contains(g.Logs(), a.Proof) || strings.Contains(g.Logs(), a.LockID) {
		t.Fatal("the gateway logged a proof or lockId")
	}

	// On a signed route, a caller without a proof learns nothing: the
	// denial comes before the store read, so it names no current fence.
	r := fwdCheck(t, g, "signed", "/orders/42", "000000000000000", "")
	wantCheck(t, "stale fence on a signed route", r, 403, "bad-proof")
	if r.JSON["current"] != "" {
		t.Fatalf("a proof-less denial named the current fence: %s", r.Body)
	}
	// The attacker learns the current fence from a denial on another route.
	r = fwdCheck(t, g, "none", "/orders/42", "000000000000000", "")
	wantCheck(t, "stale fence", r, 409, "stale")
	current, _ := r.JSON["current"].(string)
	if current != a.Fence {
		t.Fatalf("denial names current %q, want %q", current, a.Fence)
	}
	wantCheck(t, "replayed fence on a route without proof", fwdCheck(t, g, "none", "/orders/42", current, ""), 200, "")
	wantCheck(t, "replayed fence on a signed route", fwdCheck(t, g, "signed", "/orders/42", current, ""), 403, "bad-proof")
	wantCheck(t, "replayed fence, garbage proof", fwdCheck(t, g, "signed", "/orders/42", current, "v1.k-old.AAAA.BBBB"), 403, "bad-proof")
	wantCheck(t, "unknown proof mode fails closed", fwdCheck(t, g, "sined", "/orders/42", current, a.Proof), 503, "unavailable")
	ok := fwdCheck(t, g, "signed", "/orders/42", a.Fence, a.Proof)
	wantCheck(t, "holder's proof", ok, 200, "")
	if ok.Header.Get("X-Fence-Verified") != a.Fence {
		t.Fatalf("x-fence-verified %q", ok.Header.Get("X-Fence-Verified"))
	}
	wantCheck(t, "lockId route without lockId", fwdCheck(t, g, "lockId", "/orders/42", a.Fence, a.Proof), 403, "bad-proof")

	b := acquireProof(t, g, "orders/43")
	wantCheck(t, "proof and fence of another key", fwdCheck(t, g, "signed", "/orders/42", b.Fence, b.Proof), 403, "bad-proof")

	// Re-acquire: the old proof is for an older fence.
	if r := post(t, g.URL(), "/v1/locks/release", `{"lockId":%q}`, a.LockID); r.Status != 200 {
		t.Fatalf("release: %d", r.Status)
	}
	a2 := acquireProof(t, g, "orders/42")
	wantCheck(t, "old proof with its old fence", fwdCheck(t, g, "signed", "/orders/42", a.Fence, a.Proof), 409, "stale")
	wantCheck(t, "old proof with the new fence", fwdCheck(t, g, "signed", "/orders/42", a2.Fence, a.Proof), 403, "bad-proof")
	wantCheck(t, "new proof", fwdCheck(t, g, "signed", "/orders/42", a2.Fence, a2.Proof), 200, "")

	// Envoy ext_authz: the same decisions from context_extensions.
	az := authv3.NewAuthorizationClient(dialGRPC(t, g.Authz))
	extCheck := func(fence, proof string) int {
		h := map[string]string{":method": "PUT", ":path": "/orders/42", "x-fence-token": fence}
		if proof != "" {
			h["x-fence-proof"] = proof
		}
		resp, err := az.Check(rpcCtx(t), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source:            &authv3.AttributeContext_Peer{Address: &corev3.Address{}},
			Request:           &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Method: "PUT", Path: "/orders/42", Headers: h}},
			ContextExtensions: map[string]string{"fence_key": "orders/{2:int}", "fence_proof": "signed"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if d := resp.GetDeniedResponse(); d != nil {
			return int(d.GetStatus().GetCode())
		}
		return 200
	}
	if got := extCheck(a2.Fence, ""); got != 403 {
		t.Fatalf("ext_authz, replayed fence: %d, want 403", got)
	}
	if got := extCheck(a2.Fence, b.Proof); got != 403 {
		t.Fatalf("ext_authz, another key's proof: %d, want 403", got)
	}
	if got := extCheck(a2.Fence, a2.Proof); got != 200 {
		t.Fatalf("ext_authz, holder's proof: %d, want 200", got)
	}

	// The gRPC lock API answers the proof too.
	c := fencegatev1.NewLocksClient(dialGRPC(t, g.GRPC))
	gr, err := c.Acquire(rpcCtx(t), &fencegatev1.AcquireRequest{Key: "orders/44"})
	if err != nil || !gr.GetOk() {
		t.Fatalf("gRPC acquire: %v %v", gr, err)
	}
	if _, err := v.Verify(gr.GetProof(), "orders/44", gr.GetFence()); err != nil {
		t.Fatalf("gRPC acquire's proof: %v", err)
	}

	// lock run exports FENCE_PROOF.
	out := filepath.Join(t.TempDir(), "env")
	res := runFencegate(t, 60*time.Second, nil, "lock", "run", "--server", g.URL(), "--key", "orders/45", "--",
		"sh", "-c", `printf '%s\n%s\n' "$FENCE_TOKEN" "$FENCE_PROOF" > "$0"`, out)
	if res.code != 0 {
		t.Fatalf("lock run: %d\n%s", res.code, res.stderr)
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("lock run env: %q", lines)
	}
	if _, err := v.Verify(lines[1], "orders/45", lines[0]); err != nil {
		t.Fatalf("FENCE_PROOF %q: %v", lines[1], err)
	}
}

// TestProofRotation: a proof signed by the old key keeps passing while the
// old key is listed (second, then after the swap), proofs are then signed
// by the new key, and once the old key is removed its proofs are refused
// even for the current fence.
func TestProofRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, kid := range []string{"k-old", "k-new"} {
		if res := runFencegate(t, 30*time.Second, nil, "proofkey", "--kid", kid, "--out", filepath.Join(dir, kid+".seed")); res.code != 0 {
			t.Fatalf("proofkey: %d %s", res.code, res.stderr)
		}
	}
	db := filepath.Join(t.TempDir(), "rot.db")

	g := proofGateway(t, db, dir, []string{"k-old"}, "")
	old := acquireProof(t, g, "orders/7") // held for 5 minutes, across restarts
	g.Stop(t)

	for i, step := range []struct {
		kids    []string
		signer  string
		oldPass bool
	}{
		{[]string{"k-old", "k-new"}, "k-old", true}, // 1: the new key verifies
		{[]string{"k-new", "k-old"}, "k-new", true}, // 2: the new key signs
		{[]string{"k-new"}, "k-new", false},         // 3: the old key is gone
	} {
		g := proofGateway(t, db, dir, step.kids, "check: {hideCurrentFence: true}")
		if _, kids := keySet(t, g); strings.Join(kids, ",") != strings.Join(step.kids, ",") {
			t.Fatalf("keys %v: served %v", step.kids, kids)
		}
		status, reason := 403, "bad-proof"
		if step.oldPass {
			status, reason = 200, ""
		}
		wantCheck(t, fmt.Sprintf("keys %v, old key's proof", step.kids), fwdCheck(t, g, "signed", "/orders/7", old.Fence, old.Proof), status, reason)
		fresh := acquireProof(t, g, fmt.Sprintf("orders/%d", 100+i))
		if !strings.HasPrefix(fresh.Proof, "v1."+step.signer+".") {
			t.Fatalf("keys %v: proof signed by %q", step.kids, fresh.Proof[:10])
		}
		// hideCurrentFence: a denial no longer tells anyone the fence.
		r := fwdCheck(t, g, "none", "/orders/7", "000000000000000", "")
		if r.Status != 409 || bytes.Contains(r.Body, []byte(old.Fence)) {
			t.Fatalf("hidden current fence: %d %s", r.Status, r.Body)
		}
		g.Stop(t)
	}
}

// TestProofConfigRefused: bad proof keys are refused at start, exit 2, with
// every problem listed.
func TestProofConfigRefused(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, cfg, "proof:\n  keys:\n    - {kid: \"a.b\", privateKey: AAAA}\n    - {kid: k2, privateKeyFile: /nonexistent/seed}\n")
	res := runFencegate(t, 30*time.Second, nil, "serve", "--config", cfg, "--store", "bolt://"+filepath.Join(t.TempDir(), "x.db"))
	if res.code != 2 || !strings.Contains(res.stderr, "proof.keys[0].kid") || !strings.Contains(res.stderr, "proof.keys[1]") {
		t.Fatalf("serve with bad proof keys: exit %d\n%s", res.code, res.stderr)
	}
}
