package fenceguard

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/writeproof"
)

// Fence is what Guard verified for a request: the lock key the handler
// writes under and the fence the edge checked. Handlers read it with
// FromContext and hand both to their fenced commit.
type Fence struct {
	Key   string // the handler's key, NFC-normalised (as the edge and the proofs name it)
	Fence string // 15 digits, at least 1
	// Proven: a signed write proof for Key and Fence verified against the
	// gateway's keys (Options.Proofs set). Without it, Fence is only as
	// good as the network path that brought x-fence-verified.
	Proven bool
}

type ctxKey struct{}

// FromContext returns the Fence Guard put into ctx, if any.
func FromContext(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(ctxKey{}).(Fence)
	return f, ok
}

// NewContext returns ctx carrying f (for tests, and for work a handler
// hands to a queue: the job commits under the request's Fence).
func NewContext(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, ctxKey{}, f)
}

// ProofVerifier verifies a signed write proof for key and fence. *KeySet
// (the gateway's published keys, fetched and cached) and StaticKeys
// implement it. An error wrapping ErrKeysUnavailable means it could not
// decide (answered 503); any other error refuses the proof (403).
type ProofVerifier interface {
	Verify(ctx context.Context, proof, key, fence string) (writeproof.Claims, error)
}

// StaticKeys is a ProofVerifier over a fixed set of keys (for tests, or a
// deployment that ships the gateway's public keys with the API).
func StaticKeys(v *writeproof.Verifier) ProofVerifier { return staticKeys{v} }

type staticKeys struct{ v *writeproof.Verifier }

func (s staticKeys) Verify(_ context.Context, proof, key, fence string) (writeproof.Claims, error) {
	return s.v.Verify(proof, key, fence)
}

// Options configure a Guard.
type Options struct {
	// Key returns the lock key the handler writes under, from the request
	// (typically its path: "orders/" + r.PathValue("id")). Required. An
	// error refuses the request 400 malformed. When the request also
	// carries x-fence-key (a route that takes the key from that header),
	// it must name the same key (after NFC), else 400 malformed: the fence
	// the edge verified was another key's.
	Key func(r *http.Request) (string, error)
	// Proofs, when set, requires every request to carry a signed write
	// proof (x-fence-proof) for Key and the verified fence, verified
	// offline: a missing or failing proof is 403 bad-proof, a verifier that
	// cannot decide (no keys could be fetched) 503 unavailable. Use it
	// whenever something other than the edge can reach the API.
	Proofs ProofVerifier
	// Log receives debug records of refusals (reason only: never a key, a
	// fence or a proof). nil: slog.Default().
	Log *slog.Logger
}

// Guard is the middleware. Every request it wraps is treated as a write:
// wrap the handlers that write, not the reads.
type Guard struct {
	key    func(*http.Request) (string, error)
	proofs ProofVerifier
	log    *slog.Logger
}

// New returns a Guard; it panics if o.Key is nil (a programming error: the
// guard cannot know which key a request writes).
func New(o Options) *Guard {
	if o.Key == nil {
		panic("fenceguard: Options.Key is required")
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	return &Guard{key: o.Key, proofs: o.Proofs, log: log}
}

// Wrap returns next behind the guard: next runs only for a request whose
// verified fence (and, with Options.Proofs, proof) is in order, with the
// Fence in its context; every other request is refused as the edge would
// refuse it.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, reason, err := g.Check(r)
		if reason != "" {
			g.log.LogAttrs(r.Context(), slog.LevelDebug, "fenceguard: write refused",
				slog.String("reason", string(reason)), slog.String("method", r.Method), slog.Any("error", err))
			refuse(w, r, reason, f.Key, f.Fence, "")
			return
		}
		next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), f)))
	})
}

// maxRawKey bounds a key before it is normalised: NFC shrinks a string by
// at most a factor of 3 (Hangul jamo), so anything longer cannot be a key
// of lockstore.MaxKeyLengthBytes and is not worth normalising.
const maxRawKey = 4 * lockstore.MaxKeyLengthBytes

// normalizeKey is lockstore.NormalizeKey (NFC, at most 512 bytes) behind a
// cheap length bound.
func normalizeKey(k string) (string, error) {
	if len(k) > maxRawKey {
		return "", errors.New("fenceguard: key longer than any valid key")
	}
	return lockstore.NormalizeKey(k)
}

// errKeyMismatch: x-fence-key names another key than the handler's.
var errKeyMismatch = errors.New("fenceguard: x-fence-key names another key than the handler's")

// Check reads what the edge vouched for in r and returns the Fence, or the
// reason to refuse r (and, for logs, the error behind it). The returned
// Fence carries what could be read even on refusal (for the denial body).
func (g *Guard) Check(r *http.Request) (Fence, Reason, error) {
	var f Fence
	raw, err := g.key(r)
	if err != nil {
		return f, ReasonMalformed, err
	}
	key, err := normalizeKey(raw)
	if err != nil {
		return f, ReasonMalformed, err
	}
	f.Key = raw
	if hs := r.Header.Values(HeaderKey); len(hs) > 1 {
		return f, ReasonMalformed, errors.New("fenceguard: x-fence-key sent twice")
	} else if len(hs) == 1 {
		if hk, err := normalizeKey(hs[0]); err != nil || hk != key {
			return f, ReasonMalformed, errKeyMismatch
		}
	}
	f.Key = key

	vs := r.Header.Values(HeaderVerified)
	switch {
	case len(vs) == 0 || len(vs) == 1 && vs[0] == "":
		return f, ReasonMissing, errors.New("fenceguard: no x-fence-verified")
	case len(vs) > 1:
		return f, ReasonMalformed, errors.New("fenceguard: x-fence-verified sent twice")
	}
	n, err := lockstore.ParseFence(vs[0]) // exactly 15 ASCII digits, so bounded
	if err != nil || n < 1 {
		return f, ReasonMalformed, errors.New("fenceguard: x-fence-verified is not a fence")
	}
	f.Fence = vs[0]

	if g.proofs == nil {
		return f, "", nil
	}
	ps := r.Header.Values(HeaderProof)
	switch {
	case len(ps) == 0 || len(ps) == 1 && ps[0] == "":
		return f, ReasonBadProof, errors.New("fenceguard: no x-fence-proof")
	case len(ps) > 1:
		return f, ReasonMalformed, errors.New("fenceguard: x-fence-proof sent twice")
	case len(ps[0]) > writeproof.MaxLength:
		return f, ReasonBadProof, writeproof.ErrMalformed
	}
	if _, err := g.proofs.Verify(r.Context(), ps[0], key, f.Fence); err != nil {
		if errors.Is(err, ErrKeysUnavailable) {
			return f, ReasonUnavailable, err
		}
		return f, ReasonBadProof, err
	}
	f.Proven = true
	return f, "", nil
}

// ProofVerifierFunc adapts a function to ProofVerifier.
type ProofVerifierFunc func(ctx context.Context, proof, key, fence string) (writeproof.Claims, error)

// Verify calls f.
func (f ProofVerifierFunc) Verify(ctx context.Context, proof, key, fence string) (writeproof.Claims, error) {
	return f(ctx, proof, key, fence)
}
