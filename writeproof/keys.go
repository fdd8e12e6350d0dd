package writeproof

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// Key is one Ed25519 key with its id.
type Key struct {
	KID  string
	Seed []byte // the 32-byte Ed25519 private key seed
}

// Signer signs proofs with its first key and verifies with all of them.
type Signer struct {
	kid  string
	priv ed25519.PrivateKey
	v    *Verifier
	now  func() time.Time
}

// NewSigner returns a Signer over keys: the first signs, every key
// verifies. Kids must be valid (ValidKID) and distinct, seeds 32 bytes.
func NewSigner(keys []Key) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("writeproof: no keys")
	}
	pubs := make(map[string]ed25519.PublicKey, len(keys))
	order := make([]string, 0, len(keys))
	var first ed25519.PrivateKey
	for i, k := range keys {
		if len(k.Seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("writeproof: key %q: seed must be %d bytes, got %d", k.KID, ed25519.SeedSize, len(k.Seed))
		}
		priv := ed25519.NewKeyFromSeed(k.Seed)
		if i == 0 {
			first = priv
		}
		if err := addKey(pubs, &order, k.KID, priv.Public().(ed25519.PublicKey)); err != nil {
			return nil, err
		}
	}
	return &Signer{kid: keys[0].KID, priv: first, v: &Verifier{keys: pubs, order: order}, now: time.Now}, nil
}

func addKey(pubs map[string]ed25519.PublicKey, order *[]string, kid string, pub ed25519.PublicKey) error {
	if !ValidKID(kid) {
		return fmt.Errorf("writeproof: key id %q: want 1 to %d characters of [A-Za-z0-9_-]", kid, maxKIDLength)
	}
	if _, dup := pubs[kid]; dup {
		return fmt.Errorf("writeproof: key id %q is listed twice", kid)
	}
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("writeproof: key %q: public key must be %d bytes", kid, ed25519.PublicKeySize)
	}
	pubs[kid] = pub
	*order = append(*order, kid)
	return nil
}

// KID is the id of the signing key.
func (s *Signer) KID() string { return s.kid }

// Verifier verifies with every key of the signer (rotation); nil for a nil
// Signer (no keys configured).
func (s *Signer) Verifier() *Verifier {
	if s == nil {
		return nil
	}
	return s.v
}

// Sign returns the proof that the holder of lockID may write to key under
// fence. key is normalised (NFC) as every lock operation does.
func (s *Signer) Sign(key, fence, lockID string) (string, error) {
	if _, err := lockstore.NormalizeKey(key); err != nil {
		return "", fmt.Errorf("writeproof: %w", err)
	}
	if lockID == "" {
		return "", errors.New("writeproof: empty lockId")
	}
	return s.sign(Claims{KID: s.kid, Fence: fence, KeyDigest: digestKey(key), LockIDHash: LockIDHash(lockID), IssuedAtMs: s.now().UnixMilli()})
}

func (s *Signer) sign(c Claims) (string, error) {
	payload, err := encodePayload(c)
	if err != nil {
		return "", err
	}
	sig := ed25519.Sign(s.priv, signedMessage(s.kid, payload))
	enc := base64.RawURLEncoding
	return Version + "." + s.kid + "." + enc.EncodeToString(payload) + "." + enc.EncodeToString(sig), nil
}

// Verifier checks proofs against a set of public keys. It is safe for
// concurrent use.
type Verifier struct {
	keys  map[string]ed25519.PublicKey
	order []string
}

// NewVerifier returns a Verifier over kid → public key.
func NewVerifier(keys map[string]ed25519.PublicKey) (*Verifier, error) {
	v := &Verifier{keys: make(map[string]ed25519.PublicKey, len(keys))}
	kids := make([]string, 0, len(keys))
	for kid := range keys {
		kids = append(kids, kid)
	}
	sort.Strings(kids)
	for _, kid := range kids {
		if err := addKey(v.keys, &v.order, kid, keys[kid]); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// Verify checks that proof is genuine (a known key signed it) and that it
// is for key and fence. It returns the proof's claims, or an error wrapping
// ErrMalformed, ErrUnknownKey, ErrBadSignature, ErrWrongKey or
// ErrWrongFence. It does not say whether fence is current: the edge reads
// the store for that, and an offline verifier compares with the fence it
// stored.
func (v *Verifier) Verify(proof, key, fence string) (Claims, error) {
	p, err := v.VerifySignature(proof)
	if err != nil {
		return Claims{}, err
	}
	kd := digestKey(key)
	if subtle.ConstantTimeCompare(p.KeyDigest[:], kd[:]) != 1 {
		return Claims{}, ErrWrongKey
	}
	if p.Fence != fence {
		return Claims{}, ErrWrongFence
	}
	return p, nil
}

// VerifySignature parses proof and checks its signature, and nothing else.
func (v *Verifier) VerifySignature(proof string) (Claims, error) {
	p, err := Parse(proof)
	if err != nil {
		return Claims{}, err
	}
	pub, ok := v.keys[p.KID]
	if !ok {
		return Claims{}, ErrUnknownKey
	}
	if !ed25519.Verify(pub, signedMessage(p.KID, p.payload), p.sig) {
		return Claims{}, ErrBadSignature
	}
	return p.Claims, nil
}

// KeySet is the JSON document GET /v1/proof/keys serves: the verifying keys
// in JWK form (RFC 8037: kty OKP, crv Ed25519, x the base64url public key),
// the signing key first.
type KeySet struct {
	Keys []JWK `json:"keys"`
}

// JWK is one public key of a KeySet.
type JWK struct {
	KTY string `json:"kty"` // "OKP"
	CRV string `json:"crv"` // "Ed25519"
	KID string `json:"kid"`
	X   string `json:"x"`   // base64url (unpadded) public key
	Use string `json:"use"` // "sig"
	Alg string `json:"alg"` // "EdDSA"
}

// KeySet returns v's keys as a KeySet.
func (v *Verifier) KeySet() KeySet {
	ks := KeySet{Keys: make([]JWK, 0, len(v.order))}
	for _, kid := range v.order {
		ks.Keys = append(ks.Keys, JWK{KTY: "OKP", CRV: "Ed25519", KID: kid,
			X: base64.RawURLEncoding.EncodeToString(v.keys[kid]), Use: "sig", Alg: "EdDSA"})
	}
	return ks
}

// ReadKeySet reads a KeySet document (the body of GET /v1/proof/keys) into
// a Verifier. Keys of another type or curve are refused, not skipped: a
// verifier must know exactly which keys it trusts.
func ReadKeySet(r io.Reader) (*Verifier, error) {
	var ks KeySet
	dec := json.NewDecoder(io.LimitReader(r, 1<<20))
	if err := dec.Decode(&ks); err != nil {
		return nil, fmt.Errorf("writeproof: key set: %w", err)
	}
	v := &Verifier{keys: make(map[string]ed25519.PublicKey, len(ks.Keys))}
	for _, k := range ks.Keys {
		if k.KTY != "OKP" || k.CRV != "Ed25519" {
			return nil, fmt.Errorf("writeproof: key set: key %q is %s/%s, want OKP/Ed25519", k.KID, k.KTY, k.CRV)
		}
		pub, err := base64.RawURLEncoding.Strict().DecodeString(k.X)
		if err != nil {
			return nil, fmt.Errorf("writeproof: key set: key %q: %w", k.KID, err)
		}
		if err := addKey(v.keys, &v.order, k.KID, pub); err != nil {
			return nil, err
		}
	}
	if len(v.keys) == 0 {
		return nil, errors.New("writeproof: key set has no keys")
	}
	return v, nil
}

// ParseSeed reads a 32-byte Ed25519 seed written in base64 (unpadded
// base64url, as `fencegate proofkey` prints it, or standard base64),
// ignoring surrounding whitespace (a file's trailing newline).
func ParseSeed(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != ed25519.SeedSize {
				return nil, fmt.Errorf("writeproof: seed is %d bytes, want %d", len(b), ed25519.SeedSize)
			}
			return b, nil
		}
	}
	return nil, errors.New("writeproof: seed is not base64")
}

// GenerateSeed returns a fresh random Ed25519 seed.
func GenerateSeed() []byte {
	b := make([]byte, ed25519.SeedSize)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error (Go >= 1.24)
	return b
}
