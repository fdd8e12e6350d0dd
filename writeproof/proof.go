package writeproof

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/lockstore"
)

// Header is the request header a proof travels in.
const Header = fencewire.HeaderProof

// Version is the only proof version this package reads and writes.
const Version = "v1"

// signingContext separates proof signatures from anything else the same
// key might ever sign.
const signingContext = "fencegate write proof v1"

// Sizes of the format (see the package doc).
const (
	payloadSize   = 8 + sha256.Size + sha256.Size + 8
	maxKIDLength  = 32
	payloadB64Len = (payloadSize*8 + 5) / 6 // unpadded base64url
	sigB64Len     = (ed25519.SignatureSize*8 + 5) / 6
	// MaxLength bounds a proof's length; anything longer is malformed
	// before it is decoded.
	MaxLength = len(Version) + 1 + maxKIDLength + 1 + payloadB64Len + 1 + sigB64Len
)

// Errors Verify returns, for callers (and the edge) to branch on. Every
// error Verify or Parse returns wraps exactly one of them.
var (
	// ErrMalformed: not a proof of this version (segments, sizes, encoding).
	ErrMalformed = errors.New("writeproof: malformed proof")
	// ErrUnknownKey: the proof names a kid the verifier does not know (an
	// old key removed after rotation, or another gateway's).
	ErrUnknownKey = errors.New("writeproof: unknown key id")
	// ErrBadSignature: the signature does not verify under the named key.
	ErrBadSignature = errors.New("writeproof: bad signature")
	// ErrWrongKey: a genuine proof, for another lock key.
	ErrWrongKey = errors.New("writeproof: proof is for another key")
	// ErrWrongFence: a genuine proof, for another fence.
	ErrWrongFence = errors.New("writeproof: proof is for another fence")
)

// Claims are what a proof says. The key and lockId are present only as
// SHA-256 digests: a proof in a log reveals neither.
type Claims struct {
	KID        string
	Fence      string              // 15 digits
	KeyDigest  lockstore.KeyDigest // SHA-256 of the NFC key
	LockIDHash [32]byte            // SHA-256 of the lockId
	IssuedAtMs int64
}

// Proof is a parsed, not yet verified, proof.
type Proof struct {
	Claims
	payload []byte
	sig     []byte
}

// digestKey is key's lockstore.KeyDigest, as a proof carries it. An
// invalid key matches no proof: a proof is only ever signed for a
// normalised key, and an invalid one gets the digest of other bytes.
func digestKey(key string) lockstore.KeyDigest {
	n, err := lockstore.NormalizeKey(key)
	if err != nil {
		return sha256.Sum256([]byte("\x00invalid\x00" + key))
	}
	return lockstore.DigestKey(n)
}

// LockIDHash is the SHA-256 of lockID, as a proof carries it.
func LockIDHash(lockID string) [32]byte { return sha256.Sum256([]byte(lockID)) }

// ValidKID reports whether kid may name a key: 1 to 32 characters of
// [A-Za-z0-9_-] (no '.', which separates a proof's segments).
func ValidKID(kid string) bool {
	if kid == "" || len(kid) > maxKIDLength {
		return false
	}
	for i := 0; i < len(kid); i++ {
		if !isB64URL(kid[i]) {
			return false
		}
	}
	return true
}

func isB64URL(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// Parse reads s strictly: exactly four '.'-separated segments, version v1,
// a valid kid, and unpadded base64url of exactly the payload and signature
// sizes, in the one canonical encoding (no stray low bits). It checks no
// signature: use a Verifier.
func Parse(s string) (Proof, error) {
	if len(s) > MaxLength {
		return Proof{}, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxLength)
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return Proof{}, fmt.Errorf("%w: want 4 segments, got %d", ErrMalformed, len(parts))
	}
	if parts[0] != Version {
		return Proof{}, fmt.Errorf("%w: unknown version", ErrMalformed)
	}
	if !ValidKID(parts[1]) {
		return Proof{}, fmt.Errorf("%w: bad key id", ErrMalformed)
	}
	payload, err := decodeExact(parts[2], payloadSize)
	if err != nil {
		return Proof{}, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	sig, err := decodeExact(parts[3], ed25519.SignatureSize)
	if err != nil {
		return Proof{}, fmt.Errorf("%w: signature: %v", ErrMalformed, err)
	}
	p := Proof{payload: payload, sig: sig}
	p.KID = parts[1]
	n := binary.BigEndian.Uint64(payload[0:8])
	if n < 1 || n > uint64(lockstore.FenceMax) {
		return Proof{}, fmt.Errorf("%w: fence out of range", ErrMalformed)
	}
	p.Fence = fmt.Sprintf("%0*d", lockstore.FenceDigits, n)
	copy(p.KeyDigest[:], payload[8:40])
	copy(p.LockIDHash[:], payload[40:72])
	at := binary.BigEndian.Uint64(payload[72:80])
	if at > 1<<62 {
		return Proof{}, fmt.Errorf("%w: issuedAtMs out of range", ErrMalformed)
	}
	p.IssuedAtMs = int64(at)
	return p, nil
}

// decodeExact decodes unpadded base64url of exactly n bytes, refusing any
// other spelling of the same bytes (padding, whitespace, non-zero trailing
// bits), so that one proof has one string.
func decodeExact(s string, n int) ([]byte, error) {
	if len(s) != (n*8+5)/6 {
		return nil, fmt.Errorf("want %d characters, got %d", (n*8+5)/6, len(s))
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, err
	}
	if len(b) != n {
		return nil, fmt.Errorf("want %d bytes, got %d", n, len(b))
	}
	return b, nil
}

// signedMessage is what the signature covers.
func signedMessage(kid string, payload []byte) []byte {
	m := make([]byte, 0, len(signingContext)+1+len(kid)+1+len(payload))
	m = append(m, signingContext...)
	m = append(m, 0)
	m = append(m, kid...)
	m = append(m, 0)
	return append(m, payload...)
}

func encodePayload(c Claims) ([]byte, error) {
	n, err := lockstore.ParseFence(c.Fence)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("writeproof: fence %q: want 15 digits, at least 1", c.Fence)
	}
	if c.IssuedAtMs < 0 || c.IssuedAtMs > 1<<62 {
		return nil, fmt.Errorf("writeproof: issuedAtMs %d out of range", c.IssuedAtMs)
	}
	b := make([]byte, payloadSize)
	binary.BigEndian.PutUint64(b[0:8], uint64(n))
	copy(b[8:40], c.KeyDigest[:])
	copy(b[40:72], c.LockIDHash[:])
	binary.BigEndian.PutUint64(b[72:80], uint64(c.IssuedAtMs))
	return b, nil
}
