package writeproof

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

const (
	testKey    = "orders/42"
	testFence  = "000000000000007"
	testLockID = "p8s1m66P1k_mBCcoO-Qe2Q"
)

func seed(b byte) []byte { return bytes.Repeat([]byte{b}, ed25519.SeedSize) }

func newSigner(t testing.TB, keys ...Key) *Signer {
	t.Helper()
	s, err := NewSigner(keys)
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return time.UnixMilli(1_795_345_684_630) }
	return s
}

func sign(t testing.TB, s *Signer, key, fence, lockID string) string {
	t.Helper()
	p, err := s.Sign(key, fence, lockID)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProofRoundTrip(t *testing.T) {
	s := newSigner(t, Key{KID: "k1", Seed: seed(1)})
	p := sign(t, s, testKey, testFence, testLockID)
	if len(p) > MaxLength || len(p) > 220 {
		t.Fatalf("proof is %d bytes (max %d): %s", len(p), MaxLength, p)
	}
	if !strings.HasPrefix(p, "v1.k1.") || strings.Count(p, ".") != 3 || strings.ContainsAny(p, "=+/ ") {
		t.Fatalf("proof %q is not v1.<kid>.<b64url>.<b64url>", p)
	}
	c, err := s.Verifier().Verify(p, testKey, testFence)
	if err != nil {
		t.Fatal(err)
	}
	if c.KID != "k1" || c.Fence != testFence || c.LockIDHash != LockIDHash(testLockID) ||
		c.KeyDigest != digestKey(testKey) || c.IssuedAtMs != 1_795_345_684_630 {
		t.Fatalf("claims %+v", c)
	}
	if strings.Contains(p, testLockID) {
		t.Fatal("the proof carries the raw lockId")
	}
	// NFC-equivalent spellings of a key name one lock, so one proof.
	s2 := newSigner(t, Key{KID: "k1", Seed: seed(1)})
	pd := sign(t, s2, "caf\u0065\u0301", testFence, testLockID)
	if _, err := s.Verifier().Verify(pd, "caf\u00e9", testFence); err != nil {
		t.Fatalf("NFC-equivalent key: %v", err)
	}
}

// TestProofTamper flips every part of a genuine proof and expects the
// error naming it; none may verify.
func TestProofTamper(t *testing.T) {
	s := newSigner(t, Key{KID: "k1", Seed: seed(1)}, Key{KID: "k2", Seed: seed(2)})
	v := s.Verifier()
	p := sign(t, s, testKey, testFence, testLockID)
	parts := strings.Split(p, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[2])
	sig, _ := base64.RawURLEncoding.DecodeString(parts[3])
	enc := base64.RawURLEncoding.EncodeToString
	withPayload := func(f func(b []byte)) string {
		b := bytes.Clone(payload)
		f(b)
		return strings.Join([]string{parts[0], parts[1], enc(b), parts[3]}, ".")
	}
	flipSig := bytes.Clone(sig)
	flipSig[10] ^= 0x04
	other := newSigner(t, Key{KID: "k1", Seed: seed(9)}) // same kid, another key

	cases := []struct {
		name       string
		proof      string
		key, fence string
		want       error
	}{
		{"another key", p, "orders/43", testFence, ErrWrongKey},
		{"another fence", p, testKey, "000000000000008", ErrWrongFence},
		{"older fence", p, testKey, "000000000000006", ErrWrongFence},
		{"payload fence changed", withPayload(func(b []byte) { b[7] ^= 1 }), testKey, testFence, ErrBadSignature},
		{"payload key digest changed", withPayload(func(b []byte) { b[8] ^= 1 }), testKey, testFence, ErrBadSignature},
		{"payload lockId hash changed", withPayload(func(b []byte) { b[40] ^= 1 }), testKey, testFence, ErrBadSignature},
		{"payload issuedAt changed", withPayload(func(b []byte) { b[79] ^= 1 }), testKey, testFence, ErrBadSignature},
		{"kid swapped to the other listed key", strings.Replace(p, ".k1.", ".k2.", 1), testKey, testFence, ErrBadSignature},
		{"kid unknown", strings.Replace(p, ".k1.", ".k3.", 1), testKey, testFence, ErrUnknownKey},
		{"signature bit flip", strings.Join([]string{parts[0], parts[1], parts[2], enc(flipSig)}, "."), testKey, testFence, ErrBadSignature},
		{"signed by a foreign key under a known kid", sign(t, other, testKey, testFence, testLockID), testKey, testFence, ErrBadSignature},
		{"version v2", "v2" + p[2:], testKey, testFence, ErrMalformed},
		{"version V1", "V1" + p[2:], testKey, testFence, ErrMalformed},
		{"extra segment", p + ".x", testKey, testFence, ErrMalformed},
		{"missing segment", strings.Join(parts[:3], "."), testKey, testFence, ErrMalformed},
		{"padding", strings.Join([]string{parts[0], parts[1], parts[2], parts[3] + "=="}, "."), testKey, testFence, ErrMalformed},
		{"std base64", strings.Join([]string{parts[0], parts[1], parts[2], base64.StdEncoding.EncodeToString(sig)}, "."), testKey, testFence, ErrMalformed},
		{"short payload", strings.Join([]string{parts[0], parts[1], parts[2][1:], parts[3]}, "."), testKey, testFence, ErrMalformed},
		{"whitespace", " " + p, testKey, testFence, ErrMalformed},
		{"empty", "", testKey, testFence, ErrMalformed},
		{"empty kid", strings.Replace(p, ".k1.", "..", 1), testKey, testFence, ErrMalformed},
		{"kid with a bad byte", strings.Replace(p, ".k1.", ".k+.", 1), testKey, testFence, ErrMalformed},
		{"fence zero", withPayload(func(b []byte) { clear(b[:8]) }), testKey, testFence, ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(tc.proof, tc.key, tc.fence)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
	// The same table catches verifiers that each skip one check: every
	// broken variant lets at least one tampered proof through.
	for name, verify := range brokenVerifiers(v) {
		accepted := 0
		for _, tc := range cases {
			if verify(tc.proof, tc.key, tc.fence) == nil {
				accepted++
			}
		}
		if accepted == 0 {
			t.Errorf("broken verifier %q refused every tampered proof: the table does not test what it skips", name)
		}
		if verify(p, testKey, testFence) != nil {
			t.Errorf("broken verifier %q refuses the genuine proof", name)
		}
	}
	// Non-canonical trailing bits: the last character of the payload
	// carries 2 bits that must be zero.
	last := parts[2][len(parts[2])-1]
	alt := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", last) ^ 1
	mangled := parts[2][:len(parts[2])-1] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[alt])
	if _, err := Parse(strings.Join([]string{parts[0], parts[1], mangled, parts[3]}, ".")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("non-canonical base64 accepted: %v", err)
	}
}

// TestProofRotation: a proof signed by a key verifies while the key is
// listed, second or first, and is refused once it is removed.
func TestProofRotation(t *testing.T) {
	old := Key{KID: "2026-01", Seed: seed(1)}
	next := Key{KID: "2026-06", Seed: seed(2)}
	byOld := sign(t, newSigner(t, old), testKey, testFence, testLockID)

	both := newSigner(t, old, next) // step 1: the new key verifies
	if both.KID() != "2026-01" {
		t.Fatalf("signing kid %q, want the first key", both.KID())
	}
	swapped := newSigner(t, next, old) // step 2: the new key signs
	byNew := sign(t, swapped, testKey, testFence, testLockID)
	if !strings.HasPrefix(byNew, "v1.2026-06.") {
		t.Fatalf("swapped signer signs with %q", byNew[:12])
	}
	for _, s := range []*Signer{both, swapped} {
		for _, p := range []string{byOld, byNew} {
			if _, err := s.Verifier().Verify(p, testKey, testFence); err != nil {
				t.Fatalf("during rotation: %v", err)
			}
		}
	}
	done := newSigner(t, next) // step 3: the old key is gone
	if _, err := done.Verifier().Verify(byOld, testKey, testFence); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("old key's proof after removal: %v, want ErrUnknownKey", err)
	}
	if _, err := done.Verifier().Verify(byNew, testKey, testFence); err != nil {
		t.Fatal(err)
	}
}

func TestKeySetRoundTrip(t *testing.T) {
	s := newSigner(t, Key{KID: "b", Seed: seed(1)}, Key{KID: "a", Seed: seed(2)})
	b, err := json.Marshal(s.Verifier().KeySet())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"kty":"OKP","crv":"Ed25519","kid":"b"`) || strings.Index(string(b), `"kid":"b"`) > strings.Index(string(b), `"kid":"a"`) {
		t.Fatalf("key set %s: want JWKs, signing key first", b)
	}
	v, err := ReadKeySet(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(sign(t, s, testKey, testFence, testLockID), testKey, testFence); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{"keys":[]}`, `{"keys":[{"kty":"RSA","kid":"a","x":"AA"}]}`,
		`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"AA"}]}`, `not json`} {
		if _, err := ReadKeySet(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadKeySet(%s) accepted", bad)
		}
	}
}

func TestNewSignerRefuses(t *testing.T) {
	for name, keys := range map[string][]Key{
		"none":      nil,
		"short":     {{KID: "a", Seed: []byte{1}}},
		"bad kid":   {{KID: "a.b", Seed: seed(1)}},
		"empty kid": {{KID: "", Seed: seed(1)}},
		"twice":     {{KID: "a", Seed: seed(1)}, {KID: "a", Seed: seed(2)}},
	} {
		if _, err := NewSigner(keys); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	s := newSigner(t, Key{KID: "a", Seed: seed(1)})
	if _, err := s.Sign("", testFence, testLockID); err == nil {
		t.Error("Sign with an empty key accepted")
	}
	if _, err := s.Sign(strings.Repeat("k", 513), testFence, testLockID); err == nil {
		t.Error("Sign with an over-long key accepted")
	}
	if _, err := s.Sign(testKey, testFence, ""); err == nil {
		t.Error("Sign without a lockId accepted")
	}
	for _, f := range []string{"", "7", "000000000000000", "x00000000000001"} {
		if _, err := s.Sign(testKey, f, testLockID); err == nil {
			t.Errorf("Sign with fence %q accepted", f)
		}
	}
}

func TestParseSeed(t *testing.T) {
	b := seed(3)
	for _, s := range []string{base64.RawURLEncoding.EncodeToString(b) + "\n", base64.StdEncoding.EncodeToString(b)} {
		got, err := ParseSeed(s)
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("ParseSeed(%q) = %x, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "AAAA", "!!"} {
		if _, err := ParseSeed(s); err == nil {
			t.Errorf("ParseSeed(%q) accepted", s)
		}
	}
}

func FuzzParseProof(f *testing.F) {
	s := newSigner(f, Key{KID: "k1", Seed: seed(1)})
	good := sign(f, s, testKey, testFence, testLockID)
	f.Add(good)
	f.Add(good + ".")
	f.Add("v1.k1..")
	f.Add("v1...")
	f.Add("")
	f.Fuzz(func(t *testing.T, in string) {
		p, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// A proof that parses has exactly one spelling: re-encoding the
		// parsed parts gives the input back.
		enc := base64.RawURLEncoding
		if again := Version + "." + p.KID + "." + enc.EncodeToString(p.payload) + "." + enc.EncodeToString(p.sig); again != in {
			t.Fatalf("Parse(%q) re-encodes as %q", in, again)
		}
		if len(p.Fence) != 15 {
			t.Fatalf("fence %q", p.Fence)
		}
		// Only the genuine proof verifies: Go's Ed25519 is deterministic
		// and refuses non-canonical signatures, and the encoding is strict,
		// so any other string that verifies would be a forgery.
		if _, err := s.Verifier().Verify(in, testKey, testFence); err == nil && in != good {
			t.Fatalf("forged proof %q verified", in)
		}
	})
}

// brokenVerifiers are Verify with one check left out each.
func brokenVerifiers(v *Verifier) map[string]func(proof, key, fence string) error {
	sigOK := func(p Proof) bool {
		pub, ok := v.keys[p.KID]
		return ok && ed25519.Verify(pub, signedMessage(p.KID, p.payload), p.sig)
	}
	return map[string]func(proof, key, fence string) error{
		"no signature check": func(proof, key, fence string) error {
			p, err := Parse(proof)
			if err != nil || p.KeyDigest != digestKey(key) || p.Fence != fence {
				return ErrMalformed
			}
			return nil
		},
		"no key check": func(proof, key, fence string) error {
			p, err := Parse(proof)
			if err != nil || !sigOK(p) || p.Fence != fence {
				return ErrMalformed
			}
			return nil
		},
		"no fence check": func(proof, key, fence string) error {
			p, err := Parse(proof)
			if err != nil || !sigOK(p) || p.KeyDigest != digestKey(key) {
				return ErrMalformed
			}
			return nil
		},
		"lenient segments": func(proof, key, fence string) error {
			parts := strings.Split(proof, ".")
			if len(parts) > 4 {
				proof = strings.Join(parts[:4], ".")
			}
			_, err := v.Verify(proof, key, fence)
			return err
		},
	}
}

// TestKeyDigestOneMeaning: a proof carries exactly the key's
// lockstore.KeyDigest, the identity audit scoping matches by its hex (for
// any spelling of the key NFC makes one), and an invalid key's digest is
// not that of the same bytes, so it matches no proof.
func TestKeyDigestOneMeaning(t *testing.T) {
	s := newSigner(t, Key{KID: "k1", Seed: seed(1)})
	for _, key := range []string{testKey, "caf\u00e9", "cafe\u0301"} {
		p, err := Parse(sign(t, s, key, testFence, testLockID))
		if err != nil {
			t.Fatal(err)
		}
		if want := lockstore.DigestKey("caf\u00e9"); key != testKey && p.KeyDigest != want {
			t.Errorf("%q: proof carries %s, want the NFC key's %s", key, p.KeyDigest, want)
		}
		if p.KeyDigest != lockstore.DigestKey(key) || p.KeyDigest.String() != lockstore.DigestKey(key).String() {
			t.Errorf("%q: proof carries %s, want lockstore.DigestKey %s", key, p.KeyDigest, lockstore.DigestKey(key))
		}
	}
	for _, bad := range []string{"", strings.Repeat("k", lockstore.MaxKeyLengthBytes+1)} {
		if digestKey(bad) == lockstore.DigestKey(bad) {
			t.Errorf("invalid key %.10q: its proof digest is the plain digest", bad)
		}
	}
}
