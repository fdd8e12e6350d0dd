// Package auth is fencegate's bearer-token authentication: the configured
// tokens (the SHA-256 of each secret, key prefixes, operations), the
// Authenticator that checks a presented token in constant time, and the
// Principal a valid token maps to. The lock API (api), the console and
// forward-auth (cmd/fencegate) share one Authenticator; none of them owns
// it.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Operation names a lock API operation for token scopes and metrics.
type Operation string

// The operations a token can be granted. OpAudit, OpUI and OpCheck are
// never implied by an empty Operations list: the audit trail spans every
// key and may carry raw keys, the console (/ui) shows every key's locks,
// and forward-auth (/v1/authz/check) answers whether a key is held and,
// unless check.hideCurrentFence, its current fence, so they are granted
// explicitly (or with "*").
const (
	OpAcquire Operation = "acquire"
	OpRelease Operation = "release"
	OpExtend  Operation = "extend"
	OpLookup  Operation = "lookup"
	OpStatus  Operation = "status"
	OpAudit   Operation = "audit"
	// OpUI opens the console at /ui. What the console shows still needs
	// OpLookup (live locks, timelines) and OpAudit (denials).
	OpUI Operation = "ui"
	// OpCheck lets a proxy (nginx auth_request, Caddy forward_auth) ask
	// forward-auth /v1/authz/check, presenting the token in
	// Proxy-Authorization; the token's prefixes bound the keys it may check.
	OpCheck Operation = "check"
)

// lockOps are what an empty Operations list grants.
var lockOps = []Operation{OpAcquire, OpRelease, OpExtend, OpLookup, OpStatus}

// allOps is every lock API operation, in a stable order (APIOps).
var allOps = append(slices.Clone(lockOps), OpAudit)

// APIOps returns the lock API's operations (the five lock operations and
// audit), in a stable order: the lock API pre-initialises its metrics
// series with them. The console's and forward-auth's have no series.
func APIOps() []Operation { return slices.Clone(allOps) }

// grantOps is every operation a token can be granted: the lock API's plus
// the console's and forward-auth's (which have no lock API metrics series).
var grantOps = append(slices.Clone(allOps), OpUI, OpCheck)

// Token is one configured bearer token. The server keeps only the SHA-256
// of the secret, so a leaked config file does not leak a usable token.
type Token struct {
	// Name identifies the token in logs and errors (never the secret).
	Name string
	// SHA256 is the SHA-256 digest of the bearer token (ParseTokenHash reads
	// the hex form used in config files).
	SHA256 [32]byte
	// Prefixes are the key prefixes the token may use. A prefix "" or "*",
	// or an empty list, allows every key. Prefixes match the key after NFC
	// normalisation, byte for byte: "orders/" allows "orders/42".
	Prefixes []string
	// Operations the token may call (acquire, release, extend, lookup,
	// status, audit, ui, check). An empty list allows the five lock
	// operations but not audit, ui or check; "*" allows all eight.
	Operations []string
}

// ParseTokenHash decodes the 64-hex-digit SHA-256 of a token, as written in
// config files (e.g. the output of `printf %s "$TOKEN" | sha256sum`).
func ParseTokenHash(s string) ([32]byte, error) {
	var h [32]byte
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return h, fmt.Errorf("token hash: not hex: %w", err)
	}
	if len(b) != len(h) {
		return h, fmt.Errorf("token hash: want %d bytes (64 hex digits), got %d", len(h), len(b))
	}
	copy(h[:], b)
	return h, nil
}

// HashToken returns the SHA-256 of a bearer token, the value Token.SHA256
// holds. Useful for tests and for tooling that prints config lines.
func HashToken(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// Principal is an authenticated token: its name and its scopes.
type Principal struct {
	Name     string
	allKeys  bool
	prefixes []string
	ops      map[Operation]bool
}

// CanDo reports whether the principal may call op at all.
func (p *Principal) CanDo(op Operation) bool { return p.ops[op] }

// CanUseKey reports whether the principal's prefixes cover key, which must
// already be NFC-normalised (lockstore.NormalizeKey).
func (p *Principal) CanUseKey(key string) bool {
	if p.allKeys {
		return true
	}
	for _, pre := range p.prefixes {
		if strings.HasPrefix(key, pre) {
			return true
		}
	}
	return false
}

// CanUseAllKeys reports whether the principal's prefixes cover every key
// (needed for an audit query without a key filter).
func (p *Principal) CanUseAllKeys() bool { return p.allKeys }

// Authenticator checks bearer tokens against the configured set. A nil
// *Authenticator means auth is off (the loopback dev mode).
type Authenticator struct {
	hashes     [][32]byte
	principals []*Principal
}

// Authentication failures. Both are AuthFailed on the wire (401 /
// UNAUTHENTICATED); they differ only in the WWW-Authenticate error hint.
var (
	ErrNoToken      = errors.New("missing bearer token")
	ErrInvalidToken = errors.New("invalid bearer token")
)

// NewAuthenticator validates tokens and builds an Authenticator. Names must
// be unique and non-empty, digests unique and non-zero, operations known.
// It returns every problem found, joined.
func NewAuthenticator(tokens []Token) (*Authenticator, error) {
	a := &Authenticator{}
	var errs []error
	names := map[string]bool{}
	digests := map[[32]byte]string{}
	for i, t := range tokens {
		label := fmt.Sprintf("token %d (%q)", i, t.Name)
		if t.Name == "" {
			errs = append(errs, fmt.Errorf("token %d: name is empty", i))
		} else if names[t.Name] {
			errs = append(errs, fmt.Errorf("%s: duplicate name", label))
		}
		names[t.Name] = true
		if t.SHA256 == ([32]byte{}) {
			errs = append(errs, fmt.Errorf("%s: sha256 is not set", label))
		} else if other, dup := digests[t.SHA256]; dup {
			errs = append(errs, fmt.Errorf("%s: same secret as token %q", label, other))
		}
		digests[t.SHA256] = t.Name

		p := &Principal{Name: t.Name, ops: map[Operation]bool{}}
		if len(t.Prefixes) == 0 {
			p.allKeys = true
		}
		for _, pre := range t.Prefixes {
			if pre == "" || pre == "*" {
				p.allKeys = true
				continue
			}
			p.prefixes = append(p.prefixes, norm.NFC.String(pre))
		}
		if len(t.Operations) == 0 {
			for _, op := range lockOps {
				p.ops[op] = true
			}
		}
		for _, o := range t.Operations {
			if o == "*" {
				for _, op := range grantOps {
					p.ops[op] = true
				}
				continue
			}
			op := Operation(strings.ToLower(strings.TrimSpace(o)))
			if !slices.Contains(grantOps, op) {
				errs = append(errs, fmt.Errorf("%s: unknown operation %q (want one of acquire, release, extend, lookup, status, audit, ui, check, *)", label, o))
				continue
			}
			p.ops[op] = true
		}
		a.hashes = append(a.hashes, t.SHA256)
		a.principals = append(a.principals, p)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return a, nil
}

// Authenticate checks an Authorization header value ("Bearer <token>").
// The presented token is hashed and compared with every configured digest
// in constant time, with no early exit, so timing reveals neither whether
// nor which token matched.
func (a *Authenticator) Authenticate(authorization string) (*Principal, error) {
	token, ok := bearerToken(authorization)
	if !ok {
		return nil, ErrNoToken
	}
	presented := sha256.Sum256([]byte(token))
	match := -1
	for i := range a.hashes {
		eq := subtle.ConstantTimeCompare(presented[:], a.hashes[i][:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return nil, ErrInvalidToken
	}
	return a.principals[match], nil
}

// bearerToken extracts the token of an RFC 6750 "Bearer" credential. The
// scheme is case-insensitive.
func bearerToken(h string) (string, bool) {
	const scheme = "bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(scheme):])
	return tok, tok != ""
}
