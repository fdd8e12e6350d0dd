package fenceguard_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fenceguard"
	"github.com/fencegate/fencegate/writeproof"
)

const (
	lockID = "p8s1m66P1k_mBCcoO-Qe2Q"
	f7     = "000000000000007"
)

func seed(b byte) []byte { return bytes.Repeat([]byte{b}, ed25519.SeedSize) }

func signer(t testing.TB, kid string, b byte) *writeproof.Signer {
	t.Helper()
	s, err := writeproof.NewSigner([]writeproof.Key{{KID: kid, Seed: seed(b)}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sign(t testing.TB, s *writeproof.Signer, key, fence string) string {
	t.Helper()
	p, err := s.Sign(key, fence, lockID)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// orderKey is the handler's key: the path's order id.
func orderKey(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if id == "" || strings.Trim(id, "0123456789") != "" {
		return "", errors.New("not an order id")
	}
	return "orders/" + id, nil
}

// serve runs one PUT /orders/{id} through g and returns the recorder and
// the Fence the handler saw (zero if it did not run).
func serve(g *fenceguard.Guard, path string, hdr http.Header) (*httptest.ResponseRecorder, fenceguard.Fence, bool) {
	var seen fenceguard.Fence
	var ran bool
	mux := http.NewServeMux()
	mux.Handle("PUT /orders/{id}", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, ran = fenceguard.FromContext(r.Context())
		w.WriteHeader(http.StatusNoContent)
	})))
	r := httptest.NewRequest(http.MethodPut, path, strings.NewReader("{}"))
	for k, vs := range hdr {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w, seen, ran
}

type guardCase struct {
	name   string
	path   string
	hdr    http.Header
	proofs bool
	want   fenceguard.Reason // "" = the handler runs
}

// guardCases is the guard's behaviour. Each refusing case is a property a
// broken guard would lose (TestGuardCasesCatchBrokenGuards).
func guardCases(t *testing.T, gw *writeproof.Signer) []guardCase {
	forger := signer(t, "k1", 9) // same kid, another key
	h := func(kv ...string) http.Header {
		hd := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			hd.Add(kv[i], kv[i+1])
		}
		return hd
	}
	good := sign(t, gw, "orders/42", f7)
	return []guardCase{
		{"verified fence", "/orders/42", h("x-fence-verified", f7), false, ""},
		{"verified fence, matching x-fence-key", "/orders/42", h("x-fence-verified", f7, "x-fence-key", "orders/42"), false, ""},
		{"no x-fence-verified", "/orders/42", h("x-fence-token", f7), false, fenceguard.ReasonMissing},
		{"empty x-fence-verified", "/orders/42", h("x-fence-verified", ""), false, fenceguard.ReasonMissing},
		{"x-fence-verified twice", "/orders/42", h("x-fence-verified", f7, "x-fence-verified", "000000000000009"), false, fenceguard.ReasonMalformed},
		{"fence of 14 digits", "/orders/42", h("x-fence-verified", "00000000000007"), false, fenceguard.ReasonMalformed},
		{"fence zero", "/orders/42", h("x-fence-verified", "000000000000000"), false, fenceguard.ReasonMalformed},
		{"fence with a sign", "/orders/42", h("x-fence-verified", "+00000000000007"), false, fenceguard.ReasonMalformed},
		{"x-fence-key names another key", "/orders/42", h("x-fence-verified", f7, "x-fence-key", "orders/43"), false, fenceguard.ReasonMalformed},
		{"x-fence-key twice", "/orders/42", h("x-fence-verified", f7, "x-fence-key", "orders/42", "x-fence-key", "orders/42"), false, fenceguard.ReasonMalformed},
		{"the handler's key function refuses", "/orders/4x2", h("x-fence-verified", f7), false, fenceguard.ReasonMalformed},
		{"x-fence-key far too long", "/orders/42", h("x-fence-verified", f7, "x-fence-key", strings.Repeat("k", 100_000)), false, fenceguard.ReasonMalformed},
		{"x-fence-key not UTF-8", "/orders/42", h("x-fence-verified", f7, "x-fence-key", "orders/\xff"), false, fenceguard.ReasonMalformed},
		{"proof for key and fence", "/orders/42", h("x-fence-verified", f7, "x-fence-proof", good), true, ""},
		{"proofs required, none", "/orders/42", h("x-fence-verified", f7), true, fenceguard.ReasonBadProof},
		{"proof for another key", "/orders/43", h("x-fence-verified", f7, "x-fence-proof", good), true, fenceguard.ReasonBadProof},
		{"proof for another fence", "/orders/42", h("x-fence-verified", "000000000000008", "x-fence-proof", good), true, fenceguard.ReasonBadProof},
		{"forged proof", "/orders/42", h("x-fence-verified", f7, "x-fence-proof", sign(t, forger, "orders/42", f7)), true, fenceguard.ReasonBadProof},
		{"proof under an unknown key id", "/orders/42", h("x-fence-verified", f7, "x-fence-proof", sign(t, signer(t, "k9", 1), "orders/42", f7)), true, fenceguard.ReasonBadProof},
		{"malformed proof", "/orders/42", h("x-fence-verified", f7, "x-fence-proof", "v1.k1.x.y"), true, fenceguard.ReasonBadProof},
		{"overlong proof", "/orders/42", h("x-fence-verified", f7, "x-fence-proof", strings.Repeat("a", 10_000)), true, fenceguard.ReasonBadProof},
		{"proof twice", "/orders/42", h("x-fence-verified", f7, "x-fence-proof", good, "x-fence-proof", good), true, fenceguard.ReasonMalformed},
	}
}

func runGuardCases(t *testing.T, newGuard func(fenceguard.Options) *fenceguard.Guard, gw *writeproof.Signer, report func(name string, ok bool, msg string)) {
	for _, c := range guardCases(t, gw) {
		o := fenceguard.Options{Key: orderKey}
		if c.proofs {
			o.Proofs = fenceguard.StaticKeys(gw.Verifier())
		}
		w, seen, ran := serve(newGuard(o), c.path, c.hdr)
		switch {
		case c.want == "" && !ran:
			report(c.name, false, "refused "+w.Header().Get("x-fence-reason")+": "+w.Body.String())
		case c.want == "" && (seen.Key != "orders/42" || seen.Fence != f7 || seen.Proven != c.proofs):
			report(c.name, false, "context Fence "+seen.Key+" "+seen.Fence)
		case c.want != "" && ran:
			report(c.name, false, "the handler ran; want "+string(c.want))
		case c.want != "" && (w.Code != c.want.Status() || w.Header().Get("x-fence-reason") != string(c.want)):
			report(c.name, false, "got "+w.Header().Get("x-fence-reason")+"; want "+string(c.want))
		default:
			report(c.name, true, "")
		}
	}
}

func TestGuard(t *testing.T) {
	gw := signer(t, "k1", 1)
	runGuardCases(t, fenceguard.New, gw, func(name string, ok bool, msg string) {
		if !ok {
			t.Errorf("%s: %s", name, msg)
		}
	})
}

// TestGuardCasesCatchBrokenGuards runs the cases against guards broken on
// purpose: each must fail at least one case, or the cases prove nothing.
func TestGuardCasesCatchBrokenGuards(t *testing.T) {
	gw := signer(t, "k1", 1)
	acceptAll := fenceguard.ProofVerifierFunc(func(context.Context, string, string, string) (writeproof.Claims, error) {
		return writeproof.Claims{}, nil
	})
	ignoreKey := fenceguard.ProofVerifierFunc(func(ctx context.Context, proof, _, fence string) (writeproof.Claims, error) {
		c, err := gw.Verifier().VerifySignature(proof)
		if err == nil && c.Fence != fence {
			err = writeproof.ErrWrongFence
		}
		return c, err
	})
	broken := map[string]func(fenceguard.Options) *fenceguard.Guard{
		"proofs accepted unverified": func(o fenceguard.Options) *fenceguard.Guard {
			if o.Proofs != nil {
				o.Proofs = acceptAll
			}
			return fenceguard.New(o)
		},
		"proof's key not compared": func(o fenceguard.Options) *fenceguard.Guard {
			if o.Proofs != nil {
				o.Proofs = ignoreKey
			}
			return fenceguard.New(o)
		},
		"proofs not required": func(o fenceguard.Options) *fenceguard.Guard {
			o.Proofs = nil
			return fenceguard.New(o)
		},
		"key from x-fence-key, not the handler": func(o fenceguard.Options) *fenceguard.Guard {
			o.Key = func(r *http.Request) (string, error) {
				if k := r.Header.Get("x-fence-key"); k != "" {
					return k, nil
				}
				return orderKey(r)
			}
			return fenceguard.New(o)
		},
	}
	for name, nb := range broken {
		failed := 0
		runGuardCases(t, nb, gw, func(_ string, ok bool, _ string) {
			if !ok {
				failed++
			}
		})
		if failed == 0 {
			t.Errorf("broken guard %q passed every case", name)
		}
	}
}

// TestDenialIsTheEdges: the guard's refusals are the edge's, byte for byte:
// status, reason and decision-id headers, and the JSON body.
func TestDenialIsTheEdges(t *testing.T) {
	for _, reason := range []fenceguard.Reason{fenceguard.ReasonMissing, fenceguard.ReasonMalformed,
		fenceguard.ReasonStale, fenceguard.ReasonBadProof, fenceguard.ReasonUnavailable} {
		if got, want := reason.Status(), fencecheck.StatusOf(fencecheck.Reason(reason)); got != want {
			t.Errorf("%s: status %d, the edge's %d", reason, got, want)
		}
		r := httptest.NewRequest(http.MethodPut, "/orders/42", nil)
		r.Header.Set("x-fence-decision-id", "AbC_12-xyz09")
		r = r.WithContext(fenceguard.NewContext(r.Context(), fenceguard.Fence{Key: "orders/<42>&é", Fence: f7}))
		w := httptest.NewRecorder()
		fenceguard.Refuse(w, r, reason, "000000000000009")
		want := fencecheck.DenialJSON(fencecheck.Decision{Reason: fencecheck.Reason(reason), Key: "orders/<42>&é",
			Presented: f7, Current: "000000000000009", DecisionID: "AbC_12-xyz09"})
		if !bytes.Equal(w.Body.Bytes(), want) {
			t.Errorf("%s: body %s, the edge's %s", reason, w.Body.Bytes(), want)
		}
		for _, h := range fencecheck.DenialHeaders(fencecheck.Decision{Reason: fencecheck.Reason(reason), DecisionID: "AbC_12-xyz09"}) {
			if got := w.Header().Get(h[0]); got != h[1] {
				t.Errorf("%s: header %s %q, the edge's %q", reason, h[0], got, h[1])
			}
		}
	}
	// A decision id that is not one is not echoed.
	r := httptest.NewRequest(http.MethodPut, "/orders/42", nil)
	r.Header.Set("x-fence-decision-id", `"><script>`)
	w := httptest.NewRecorder()
	fenceguard.RefuseStale(w, r, fenceguard.Result{Fence: f7, Stored: "000000000000009"})
	var body map[string]string
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body["decisionId"] != "" || body["current"] != "000000000000009" || w.Code != 409 {
		t.Errorf("RefuseStale: %d %s (%v)", w.Code, w.Body, err)
	}
}

// TestNoDriverDependencies: a user of the middleware pulls neither database
// driver nor the gateway's gRPC/OpenTelemetry stack.
func TestNoDriverDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/fencegate/fencegate/fenceguard": true,
		"github.com/fencegate/fencegate/fencewire":  true,
		"github.com/fencegate/fencegate/writeproof": true,
		"github.com/fencegate/fencegate/lockstore":  true,
		"golang.org/x/text/transform":               true,
		"golang.org/x/text/unicode/norm":            true,
	}
	for _, p := range strings.Fields(string(out)) {
		if !allowed[p] {
			t.Errorf("fenceguard depends on %s", p)
		}
	}
}
