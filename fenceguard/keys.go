package fenceguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/fencegate/fencegate/writeproof"
)

// ErrKeysUnavailable: a KeySet has no keys to verify with (the gateway's key
// set could not be fetched yet). Guard answers it 503 unavailable, never
// 403: the proof may well be genuine.
var ErrKeysUnavailable = errors.New("fenceguard: the gateway's proof keys are unavailable")

// Defaults of KeySetOptions.
const (
	// DefaultMaxAge: keys older than this are fetched again on the next
	// verification. It bounds how long a key removed at the gateway (the
	// last step of a rotation) still verifies here.
	DefaultMaxAge = 5 * time.Minute
	// DefaultMinRefresh: at most one fetch per this interval, whatever
	// asks for it, so that proofs naming made-up key ids cannot make the
	// API hammer the gateway.
	DefaultMinRefresh = 10 * time.Second
	// DefaultFetchTimeout bounds one fetch of the key set.
	DefaultFetchTimeout = 2 * time.Second
	// noKeysRetry paces fetches while no key set was ever fetched.
	noKeysRetry = time.Second
	// maxKeySetBytes bounds the key set document read (writeproof.ReadKeySet
	// reads at most 1 MiB too).
	maxKeySetBytes = 1 << 20
)

// KeySetOptions configure a KeySet; the zero value uses the defaults.
type KeySetOptions struct {
	// Client fetches the key set; nil: a client with FetchTimeout. Give it
	// your TLS configuration when the gateway is served over HTTPS.
	Client *http.Client
	// MaxAge is how long fetched keys are used before they are fetched
	// again (DefaultMaxAge).
	MaxAge time.Duration
	// MinRefresh is the least time between two fetches (DefaultMinRefresh).
	MinRefresh time.Duration
	// FetchTimeout bounds each fetch (DefaultFetchTimeout).
	FetchTimeout time.Duration
	// Log receives warnings when a fetch fails. nil: slog.Default().
	Log *slog.Logger
}

// KeySet verifies write proofs against the keys a fencegate gateway
// publishes at GET /v1/proof/keys, fetched on first use and cached.
//
// Rotation needs nothing of the API: a proof signed by a key id the cached
// set does not know (the gateway moved a new key first) makes the KeySet
// fetch again at once (at most once per MinRefresh); a key the gateway
// dropped stops verifying here once the cache is older than MaxAge and a
// fetch succeeds (a removed key goes on verifying while fetches fail). When a
// fetch fails, the keys already fetched go on verifying (they are public
// keys, not secrets; a gateway outage must not stop the API's writes); with
// none fetched yet, verification fails with ErrKeysUnavailable.
//
// Time is used only to pace the fetches (the local monotonic clock): the
// fence comparison needs no clock at all.
type KeySet struct {
	url    string
	client *http.Client
	o      KeySetOptions
	log    *slog.Logger

	fetchMu sync.Mutex // one fetch at a time; others wait for its result

	mu          sync.Mutex
	v           *writeproof.Verifier
	fetchedAt   time.Time // of the keys in v
	attemptedAt time.Time // of the last fetch, successful or not
	gen         uint64    // counts finished fetches
	now         func() time.Time
}

// NewKeySet returns a KeySet over the key set document at url (the
// gateway's "http://host:port/v1/proof/keys"). Nothing is fetched until
// the first verification (or Refresh).
func NewKeySet(url string, o KeySetOptions) *KeySet {
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.MinRefresh <= 0 {
		o.MinRefresh = DefaultMinRefresh
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = DefaultFetchTimeout
	}
	c := o.Client
	if c == nil {
		c = &http.Client{Timeout: o.FetchTimeout}
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	return &KeySet{url: url, client: c, o: o, log: log, now: time.Now}
}

// Verify checks that proof is genuine for key and fence (see
// writeproof.Verifier.Verify), fetching the key set when it has none yet,
// when it is older than MaxAge, and when the proof names a key id it does
// not know.
func (k *KeySet) Verify(ctx context.Context, proof, key, fence string) (writeproof.Claims, error) {
	v, gen, due := k.current()
	if v == nil || due {
		if err := k.refresh(ctx, gen); err != nil && v == nil {
			return writeproof.Claims{}, err
		}
		v, gen, _ = k.current()
		if v == nil {
			return writeproof.Claims{}, ErrKeysUnavailable
		}
	}
	c, err := v.Verify(proof, key, fence)
	if errors.Is(err, writeproof.ErrUnknownKey) && k.mayFetch() {
		_ = k.refresh(ctx, gen)
		if nv, _, _ := k.current(); nv != nil && nv != v {
			c, err = nv.Verify(proof, key, fence)
		}
	}
	return c, err
}

// Refresh fetches the key set now (subject to MinRefresh when keys are
// already cached), for an API that wants its keys before the first write.
func (k *KeySet) Refresh(ctx context.Context) error {
	_, gen, _ := k.current()
	return k.refresh(ctx, gen)
}

// current returns the cached verifier, the fetch generation, and whether a
// fetch is due (the keys are older than MaxAge and MinRefresh has passed
// since the last attempt).
func (k *KeySet) current() (*writeproof.Verifier, uint64, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	due := k.v != nil && now.Sub(k.fetchedAt) >= k.o.MaxAge && now.Sub(k.attemptedAt) >= k.o.MinRefresh
	return k.v, k.gen, due
}

// mayFetch reports whether MinRefresh has passed since the last attempt.
func (k *KeySet) mayFetch() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.now().Sub(k.attemptedAt) >= k.o.MinRefresh
}

// refresh fetches the key set unless a fetch finished since generation
// seen (another caller did the work while this one waited), or, with keys
// cached, MinRefresh has not passed since the last attempt.
func (k *KeySet) refresh(ctx context.Context, seen uint64) error {
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	k.mu.Lock()
	if k.gen != seen {
		ok := k.v != nil
		k.mu.Unlock()
		if ok {
			return nil
		}
		return ErrKeysUnavailable
	}
	// Without keys, retry sooner (the API answers 503 meanwhile), but still
	// paced: a gateway that is down is not asked once per request.
	pace := k.o.MinRefresh
	if k.v == nil {
		pace = min(pace, noKeysRetry)
	}
	if !k.attemptedAt.IsZero() && k.now().Sub(k.attemptedAt) < pace {
		ok := k.v != nil
		k.mu.Unlock()
		if ok {
			return nil
		}
		return ErrKeysUnavailable
	}
	k.mu.Unlock()

	v, err := k.fetch(ctx)

	k.mu.Lock()
	defer k.mu.Unlock()
	k.gen++
	k.attemptedAt = k.now()
	if err != nil {
		k.log.LogAttrs(ctx, slog.LevelWarn, "fenceguard: fetching the gateway's proof keys failed; keeping the keys already fetched, if any",
			slog.String("error", fetchError(err)), slog.Bool("cached", k.v != nil))
		return fmt.Errorf("%w: %v", ErrKeysUnavailable, err)
	}
	k.v, k.fetchedAt = v, k.attemptedAt
	return nil
}

func (k *KeySet) fetch(ctx context.Context) (*writeproof.Verifier, error) {
	// The fetch is not the request's: a client that gives up must not
	// leave every other request without keys. It has its own bound.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.o.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET key set: status %d", resp.StatusCode)
	}
	return writeproof.ReadKeySet(io.LimitReader(resp.Body, maxKeySetBytes))
}

// fetchError is a failed fetch's error as logs carry it: a *url.Error quotes
// the key set's URL, which may hold credentials, so only its cause is kept.
func fetchError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}
