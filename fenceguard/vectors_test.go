package fenceguard_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fenceguard"
	"github.com/fencegate/fencegate/fenceguard/redisfence"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/writeproof"
)

// The shared test vectors (testdata/vectors.json): what the Go code
// decides for header names, proofs, key sets, the guard's checks, denial bodies, the
// Redis fence keys and the commit helpers' cases. TestVectors regenerates
// them and fails when the committed file differs; js/ (@fencegate/guard)
// runs every case and must decide the same. `go test ./fenceguard -run
// TestVectors -update` rewrites the file.
var update = flag.Bool("update", false, "rewrite testdata/vectors.json")

const vectorsFile = "testdata/vectors.json"

type vectors struct {
	Comment string `json:"comment"`
	// Headers are the header names the resource side reads and answers
	// with, by their fencewire names: js/'s HEADER_* exports must equal
	// them.
	Headers   map[string]string `json:"headers"`
	KeySet    json.RawMessage   `json:"keySet"`
	Proofs    []vecProofCase    `json:"proofs"`
	Guard     []vecGuardCase    `json:"guard"`
	Denials   []vecDenialCase   `json:"denials"`
	FenceKeys []fenceKeyCase    `json:"fenceKeys"`
	Fences    []fenceInput      `json:"fences"`
	Commits   []commitCase      `json:"commits"`
	Sources   map[string]string `json:"sources"`
}

type vecProofCase struct {
	Name  string `json:"name"`
	Proof string `json:"proof"`
	Key   string `json:"key"`
	Fence string `json:"fence"`
	Want  string `json:"want"` // ok, malformed, unknown-key, bad-signature, wrong-key, wrong-fence
	// Claims of a proof that verifies.
	Claims *vectorClaims `json:"claims,omitempty"`
}

type vectorClaims struct {
	KID        string `json:"kid"`
	Fence      string `json:"fence"`
	KeyDigest  string `json:"keyDigest"`
	LockIDHash string `json:"lockIdHash"`
	IssuedAtMs int64  `json:"issuedAtMs"`
}

type vecGuardCase struct {
	Name       string      `json:"name"`
	HandlerKey string      `json:"handlerKey"`
	Proofs     bool        `json:"proofs"`
	Headers    [][2]string `json:"headers"`
	// Stored, when set, is the fence already committed for the key: an
	// allowed request then commits (<=) or is refused 409 stale.
	Stored string          `json:"stored,omitempty"`
	Want   vecGuardOutcome `json:"want"`
}

type vecGuardOutcome struct {
	Status  int               `json:"status"` // 200: allowed (and committed, with Stored)
	Key     string            `json:"key,omitempty"`
	Fence   string            `json:"fence,omitempty"`
	Proven  bool              `json:"proven,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
}

type vecDenialCase struct {
	Reason     string            `json:"reason"`
	Key        string            `json:"key"`
	Presented  string            `json:"presented"`
	Current    string            `json:"current"`
	DecisionID string            `json:"decisionIdHeader"`
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers"`
	Body       string            `json:"body"`
}

type fenceKeyCase struct {
	Key      string `json:"key"`
	FenceKey string `json:"fenceKey,omitempty"`
	Refused  bool   `json:"refused,omitempty"`
}

type fenceInput struct {
	Fence string `json:"fence"`
	Valid bool   `json:"valid"`
}

// commitCase is a sequence of fenced commits on fresh keys; every helper
// (pgfence Table and Column, redisfence, and js/'s) must decide each step
// as given. Keys are suffixes: a test prefixes them with its namespace.
type commitCase struct {
	Name  string       `json:"name"`
	Steps []commitStep `json:"steps"`
}

type commitStep struct {
	Key     string `json:"key"`
	Fence   string `json:"fence"`
	Applied bool   `json:"applied"`
	Stored  string `json:"stored"`
}

const issuedAt = 1764300000000 // fixed, so the file is the same on every run

func vecSeed(name string) []byte {
	s := sha256.Sum256([]byte("fencegate test vectors: " + name))
	return s[:]
}

// signAt is writeproof's format with a fixed issuedAtMs (Signer uses the
// clock); TestSignAtIsWriteproofs holds the two equal.
func signAt(sd []byte, kid, key, fence, lockID string, at int64) string {
	var n uint64
	_, _ = fmt.Sscan(strings.TrimLeft(fence, "0"), &n)
	p := make([]byte, 80)
	binary.BigEndian.PutUint64(p[0:8], n)
	kd := lockstore.DigestKey(key)
	copy(p[8:40], kd[:])
	lh := writeproof.LockIDHash(lockID)
	copy(p[40:72], lh[:])
	binary.BigEndian.PutUint64(p[72:80], uint64(at))
	msg := append(append(append([]byte("fencegate write proof v1\x00"), kid...), 0), p...)
	sig := ed25519.Sign(ed25519.NewKeyFromSeed(sd), msg)
	enc := base64.RawURLEncoding
	return "v1." + kid + "." + enc.EncodeToString(p) + "." + enc.EncodeToString(sig)
}

func TestSignAtIsWriteproofs(t *testing.T) {
	s, err := writeproof.NewSigner([]writeproof.Key{{KID: "k1", Seed: vecSeed("k1")}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Sign("café/1", "000000000000007", "lock-A")
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Verifier().Verify(p, "café/1", "000000000000007")
	if err != nil {
		t.Fatal(err)
	}
	if got := signAt(vecSeed("k1"), "k1", "café/1", "000000000000007", "lock-A", c.IssuedAtMs); got != p {
		t.Errorf("signAt %s\nSigner %s", got, p)
	}
}

func vf15(n int) string { return fmt.Sprintf("%015d", n) }

func verdict(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, writeproof.ErrMalformed):
		return "malformed"
	case errors.Is(err, writeproof.ErrUnknownKey):
		return "unknown-key"
	case errors.Is(err, writeproof.ErrBadSignature):
		return "bad-signature"
	case errors.Is(err, writeproof.ErrWrongKey):
		return "wrong-key"
	case errors.Is(err, writeproof.ErrWrongFence):
		return "wrong-fence"
	}
	return "error: " + err.Error()
}

// strayBits re-spells the last character of s's last segment with non-zero
// low bits: the same bytes, a non-canonical base64url.
func strayBits(s string) string {
	const alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alpha, s[len(s)-1])
	return s[:len(s)-1] + string(alpha[i|1])
}

func generate(t *testing.T) vectors {
	t.Helper()
	signer, err := writeproof.NewSigner([]writeproof.Key{{KID: "k1", Seed: vecSeed("k1")}, {KID: "k2", Seed: vecSeed("k2")}})
	if err != nil {
		t.Fatal(err)
	}
	ver := signer.Verifier()
	ks, _ := json.Marshal(ver.KeySet())
	v := vectors{
		Comment: "Generated by `go test ./fenceguard -run TestVectors -update` from the Go code; js/ checks every case. Do not edit.",
		KeySet:  ks,
		Sources: map[string]string{},
		Headers: map[string]string{
			"HeaderVerified": fencewire.HeaderVerified, "HeaderKey": fencewire.HeaderKey, "HeaderProof": fencewire.HeaderProof,
			"HeaderReason": fencewire.HeaderReason, "HeaderDecisionID": fencewire.HeaderDecisionID,
			"HeaderToken": fencewire.HeaderToken, "HeaderLockID": fencewire.HeaderLockID,
		},
	}
	k1, k2, other := vecSeed("k1"), vecSeed("k2"), vecSeed("another gateway")
	const key = "orders/42"
	long := signAt(k1, "k1", key, vf15(7), "lock-A", issuedAt)
	proofs := []struct{ name, proof, key, fence string }{
		{"valid", long, key, vf15(7)},
		{"valid, the second key (rotation)", signAt(k2, "k2", key, vf15(7), "lock-A", issuedAt), key, vf15(7)},
		{"valid, the key in another normal form", signAt(k1, "k1", "café/1", vf15(9), "lock-A", issuedAt), "cafe\u0301/1", vf15(9)},
		{"valid, FenceMax", signAt(k1, "k1", key, "900000000000000", "lock-A", issuedAt), key, "900000000000000"},
		{"fence 999999999999999, over FenceMax", signAt(k1, "k1", key, "999999999999999", "lock-A", issuedAt), key, "999999999999999"},
		{"replayed: an earlier holder's genuine proof", signAt(k1, "k1", key, vf15(5), "lock-old", issuedAt-5000), key, vf15(5)},
		{"wrong key: signed by another key under a known kid", signAt(other, "k1", key, vf15(7), "lock-A", issuedAt), key, vf15(7)},
		{"wrong kid: a kid the set does not hold", signAt(other, "k9", key, vf15(7), "lock-A", issuedAt), key, vf15(7)},
		{"wrong kid: a known key under another kid", signAt(k1, "k2", key, vf15(7), "lock-A", issuedAt), key, vf15(7)},
		{"other key's proof", signAt(k1, "k1", "orders/43", vf15(7), "lock-A", issuedAt), key, vf15(7)},
		{"other fence's proof", long, key, vf15(8)},
		{"truncated by one character", long[:len(long)-1], key, vf15(7)},
		{"truncated: no signature", long[:strings.LastIndexByte(long, '.')], key, vf15(7)},
		{"non-canonical base64url in the signature", strayBits(long), key, vf15(7)},
		{"non-canonical base64url in the payload", func() string {
			p := strings.Split(long, ".")
			p[2] = strayBits(p[2])
			return strings.Join(p, ".")
		}(), key, vf15(7)},
		{"padded base64", long + "==", key, vf15(7)},
		{"standard base64 alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(long), key, vf15(7)},
		{"version v2", "v2" + long[2:], key, vf15(7)},
		{"kid of 33 characters", signAt(k1, strings.Repeat("k", 33), key, vf15(7), "lock-A", issuedAt), key, vf15(7)},
		{"fence 0 signed", signAt(k1, "k1", key, vf15(0), "lock-A", issuedAt), key, vf15(0)},
		{"tampered payload", func() string {
			p := strings.Split(long, ".")
			b, _ := base64.RawURLEncoding.DecodeString(p[2])
			b[7] ^= 1
			p[2] = base64.RawURLEncoding.EncodeToString(b)
			return strings.Join(p, ".")
		}(), key, vf15(6)},
		{"empty", "", key, vf15(7)},
		{"longer than MaxLength", long + strings.Repeat("A", writeproof.MaxLength), key, vf15(7)},
	}
	for _, p := range proofs {
		c, err := ver.Verify(p.proof, p.key, p.fence)
		pc := vecProofCase{Name: p.name, Proof: p.proof, Key: p.key, Fence: p.fence, Want: verdict(err)}
		if err == nil {
			pc.Claims = &vectorClaims{KID: c.KID, Fence: c.Fence, KeyDigest: hex.EncodeToString(c.KeyDigest[:]),
				LockIDHash: hex.EncodeToString(c.LockIDHash[:]), IssuedAtMs: c.IssuedAtMs}
		}
		v.Proofs = append(v.Proofs, pc)
	}

	// The guard: each request through fenceguard.Guard (StaticKeys), and
	// for allowed ones with Stored, the commit's answer.
	hdr := func(kv ...string) [][2]string {
		var h [][2]string
		for i := 0; i < len(kv); i += 2 {
			h = append(h, [2]string{kv[i], kv[i+1]})
		}
		return h
	}
	F7 := vf15(7)
	type gc struct {
		name, handlerKey string
		proofs           bool
		headers          [][2]string
		stored           string
	}
	var gcs []gc
	gcs = append(gcs,
		gc{"no fence", key, false, nil, ""},
		gc{"an empty fence", key, false, hdr("x-fence-verified", ""), ""},
		gc{"a fence", key, false, hdr("x-fence-verified", F7), ""},
		gc{"a fence sent twice", key, false, hdr("x-fence-verified", F7, "x-fence-verified", F7), ""},
		gc{"a fence of 14 digits", key, false, hdr("x-fence-verified", "00000000000007"), ""},
		gc{"a fence of 16 digits", key, false, hdr("x-fence-verified", "0000000000000007"), ""},
		gc{"fence 0", key, false, hdr("x-fence-verified", vf15(0)), ""},
		gc{"a fence with a sign", key, false, hdr("x-fence-verified", "+00000000000007"), ""},
		gc{"a fence with a space inside", key, false, hdr("x-fence-verified", "0000000 0000007"), ""},
		gc{"x-fence-key the same", key, false, hdr("x-fence-verified", F7, "x-fence-key", key), ""},
		gc{"x-fence-key another", key, false, hdr("x-fence-verified", F7, "x-fence-key", "orders/43"), ""},
		gc{"x-fence-key twice", key, false, hdr("x-fence-verified", F7, "x-fence-key", key, "x-fence-key", key), ""},
		gc{"x-fence-key in another normal form", "café/1", false, hdr("x-fence-verified", F7, "x-fence-key", "cafe\u0301/1"), ""},
		gc{"x-fence-key empty", key, false, hdr("x-fence-verified", F7, "x-fence-key", ""), ""},
		gc{"the handler's key empty", "", false, hdr("x-fence-verified", F7), ""},
		gc{"the handler's key of 513 bytes", strings.Repeat("k", 513), false, hdr("x-fence-verified", F7), ""},
		gc{"the handler's key of 512 bytes", strings.Repeat("k", 512), false, hdr("x-fence-verified", F7), ""},
		gc{"the handler's key needs escaping", "orders/<42>&\"é\u2028\\", false, hdr("x-fence-verified", "7"), ""},
		gc{"the edge's decision id echoed", key, false, hdr("x-fence-decision-id", "AbC-_123xyz9"), ""},
		gc{"a decision id of 65 characters", key, false, hdr("x-fence-decision-id", strings.Repeat("a", 65)), ""},
		gc{"a decision id of 64 characters", key, false, hdr("x-fence-decision-id", strings.Repeat("a", 64)), ""},
		gc{"a decision id with a dot", key, false, hdr("x-fence-decision-id", "abc.def"), ""},
		gc{"a decision id sent twice", key, false, hdr("x-fence-decision-id", "abc", "x-fence-decision-id", "abc"), ""},
		gc{"same fence as stored: committed", key, false, hdr("x-fence-verified", F7), F7},
		gc{"higher than stored: committed", key, false, hdr("x-fence-verified", "100000000000000"), F7},
		gc{"lower than stored: 409", key, false, hdr("x-fence-verified", vf15(6), "x-fence-decision-id", "dec1"), F7},
		gc{"proofs: none", key, true, hdr("x-fence-verified", F7), ""},
		gc{"proofs: empty", key, true, hdr("x-fence-verified", F7, "x-fence-proof", ""), ""},
		gc{"proofs: sent twice", key, true, hdr("x-fence-verified", F7, "x-fence-proof", long, "x-fence-proof", long), ""},
		gc{"proofs: no fence, a proof", key, true, hdr("x-fence-proof", long), ""},
	)
	for _, p := range proofs {
		fence := p.fence
		if len(fence) != 15 {
			fence = F7
		}
		stored := ""
		if strings.HasPrefix(p.name, "replayed") {
			stored = F7
		}
		gcs = append(gcs, gc{"proofs: " + p.name, p.key, true, hdr("x-fence-verified", fence, "x-fence-proof", p.proof), stored})
	}
	g0 := fenceguard.New(fenceguard.Options{Key: func(r *http.Request) (string, error) { return r.Header.Get("test-handler-key"), nil }})
	g1 := fenceguard.New(fenceguard.Options{Key: func(r *http.Request) (string, error) { return r.Header.Get("test-handler-key"), nil },
		Proofs: fenceguard.StaticKeys(ver)})
	for _, c := range gcs {
		r := httptest.NewRequest(http.MethodPut, "/x", nil)
		r.Header["Test-Handler-Key"] = []string{c.handlerKey}
		for _, h := range c.headers {
			ck := http.CanonicalHeaderKey(h[0])
			r.Header[ck] = append(r.Header[ck], h[1])
		}
		g := g0
		if c.proofs {
			g = g1
		}
		var out vecGuardOutcome
		w := httptest.NewRecorder()
		g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f, _ := fenceguard.FromContext(r.Context())
			out = vecGuardOutcome{Status: 200, Key: f.Key, Fence: f.Fence, Proven: f.Proven}
			if c.stored != "" && f.Fence < c.stored {
				fenceguard.RefuseStale(w, r, fenceguard.Result{Fence: f.Fence, Stored: c.stored})
				return
			}
			w.WriteHeader(200)
		})).ServeHTTP(w, r)
		if w.Code != 200 {
			out = vecGuardOutcome{Status: w.Code, Body: w.Body.String(), Headers: map[string]string{}}
			for _, h := range []string{"Content-Type", "Cache-Control", fenceguard.HeaderReason, fenceguard.HeaderDecisionID} {
				out.Headers[strings.ToLower(h)] = w.Header().Get(h)
			}
		}
		v.Guard = append(v.Guard, vecGuardCase{Name: c.name, HandlerKey: c.handlerKey, Proofs: c.proofs, Headers: c.headers, Stored: c.stored, Want: out})
	}

	// Denials: every reason, with strings JSON must escape.
	for _, reason := range []fenceguard.Reason{fenceguard.ReasonMissing, fenceguard.ReasonMalformed, fenceguard.ReasonStale, fenceguard.ReasonBadProof, fenceguard.ReasonUnavailable} {
		for _, k := range []string{"orders/42", "a<b>&c", "q\"uote\\back/slash", "ctl\x00\x01\x08\x09\x0a\x0c\x0d\x1f\x7f", "line\u2028sep\u2029", "é😀\ufeff", ""} {
			r := httptest.NewRequest(http.MethodPut, "/x", nil)
			r.Header.Set(fenceguard.HeaderDecisionID, "dec-9")
			r = r.WithContext(fenceguard.NewContext(r.Context(), fenceguard.Fence{Key: k, Fence: F7}))
			w := httptest.NewRecorder()
			fenceguard.Refuse(w, r, reason, vf15(8))
			d := vecDenialCase{Reason: string(reason), Key: k, Presented: F7, Current: vf15(8), DecisionID: "dec-9",
				Status: w.Code, Body: w.Body.String(), Headers: map[string]string{}}
			for _, h := range []string{"Content-Type", "Cache-Control", fenceguard.HeaderReason, fenceguard.HeaderDecisionID} {
				d.Headers[strings.ToLower(h)] = w.Header().Get(h)
			}
			v.Denials = append(v.Denials, d)
		}
	}

	for _, k := range []string{"orders/42", "{orders/42}", "orders/42:fence", "fencegate.fence:orders/42", "fencegate.fence:", "fencegate.fenc", "x:fencegate.fence:y", "", "é"} {
		c := fenceKeyCase{Key: k}
		if k == "" || strings.HasPrefix(k, redisfence.FencePrefix) {
			c.Refused = true
		} else {
			c.FenceKey = redisfence.FenceKey(k)
		}
		v.FenceKeys = append(v.FenceKeys, c)
	}
	for _, f := range []string{vf15(1), F7, "999999999999999", "", "7", vf15(0), "0000000000000a7", "1000000000000000", "-00000000000007", " 00000000000007", "00000000000000７"} {
		n, err := parseFence15(f)
		v.Fences = append(v.Fences, fenceInput{Fence: f, Valid: err == nil && n >= 1})
	}

	// Commit cases: a model of <= (the helpers' tests run them).
	seqs := []struct {
		name  string
		steps [][2]string // key, fence
	}{
		{"one holder writes many times", [][2]string{{"a", F7}, {"a", F7}, {"a", F7}}},
		{"a lower fence is refused", [][2]string{{"a", F7}, {"a", vf15(6)}, {"a", vf15(1)}}},
		{"fences jump", [][2]string{{"a", vf15(3)}, {"a", vf15(1000)}, {"a", vf15(999)}, {"a", "999999999999999"}, {"a", "999999999999998"}}},
		{"numbers, not strings", [][2]string{{"a", vf15(9)}, {"a", vf15(10)}, {"a", vf15(9)}}},
		{"keys are apart", [][2]string{{"a", vf15(50)}, {"b", vf15(2)}, {"a:fence", vf15(1)}, {"a", vf15(49)}, {"fencegate.x", vf15(1)}}},
		{"a fresh key takes any fence", [][2]string{{"c", vf15(1)}, {"c", vf15(2)}}},
	}
	for _, s := range seqs {
		model := map[string]string{}
		cc := commitCase{Name: s.name}
		for _, st := range s.steps {
			k, f := st[0], st[1]
			applied := f >= model[k]
			if applied {
				model[k] = f
			}
			cc.Steps = append(cc.Steps, commitStep{Key: k, Fence: f, Applied: applied, Stored: model[k]})
		}
		v.Commits = append(v.Commits, cc)
	}

	for _, pat := range []string{"pgfence/*.sql", "redisfence/*.lua"} {
		files, _ := filepath.Glob(pat)
		sort.Strings(files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			v.Sources["fenceguard/"+f] = hex.EncodeToString(sum[:])
		}
	}
	return v
}

// parseFence15 is lockstore.ParseFence's rule: exactly 15 ASCII digits.
func parseFence15(s string) (int64, error) {
	if len(s) != 15 {
		return 0, errors.New("not 15 bytes")
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a digit")
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, nil
}

// TestVectors: the committed vectors are exactly what the Go code decides
// today; a change to a proof's verdict, a guard answer, a denial body, a
// fence key or a SQL/Lua file fails here until the file is regenerated
// (and then js/'s tests run the new file).
func TestVectors(t *testing.T) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(generate(t)); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(vectorsFile, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf.Bytes()) {
		t.Errorf("%s differs from what the Go code decides: run `go test ./fenceguard -run TestVectors -update` and js/'s tests", vectorsFile)
	}
}

// TestVectorsCatchDrift: the comparison TestVectors makes fails when one
// decision changes (a proof's verdict, a denial's byte).
func TestVectorsCatchDrift(t *testing.T) {
	committed, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*vectors){
		"a proof's verdict": func(v *vectors) { v.Proofs[0].Want = "malformed" },
		"a denial's body":   func(v *vectors) { v.Denials[0].Body += " " },
		"a guard status":    func(v *vectors) { v.Guard[0].Want.Status = 200 },
		"a header name":     func(v *vectors) { v.Headers["HeaderVerified"] = "x-fence-verifed" },
	} {
		v := generate(t)
		change(&v)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
		if bytes.Equal(buf.Bytes(), committed) {
			t.Errorf("%s changed, and the vectors still compare equal", name)
		}
	}
}
