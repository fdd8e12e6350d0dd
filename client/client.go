// Package client is fencegate's Go client for the lock API, over HTTP/JSON
// (New, *Client) or gRPC (NewGRPC, *GRPCClient).
//
// Both implement lock.Locker and Locks, with the same options, the
// same results and the same error codes, so the same Lock helper (retries,
// backoff, auto-extend) runs over either transport as in-process:
//
//	c, _ := client.New("http://127.0.0.1:8080", client.WithToken(tok))
//	// or: c, _ := client.NewGRPC("127.0.0.1:9090", client.WithToken(tok)); defer c.Close()
//	err := c.Lock(ctx, "orders/42", func(ctx context.Context, h lock.Held) error {
//		// ctx is cancelled the moment the lock is lost.
//		req, _ := http.NewRequestWithContext(client.WithFence(ctx, h), "PUT", url, body)
//		_, err := fenced.Do(req) // fenced uses client.NewTransport
//		return err
//	}, lock.WithAutoExtend())
//
// System failures come back as *lockstore.Error with the server's code, so
// lockstore.CodeOf works on them and gives the same code whichever
// transport carried the call; contention and absent locks are results.
// The error's cause keeps the transport's own answer: an *HTTPStatusError,
// or a gRPC status (status.Code(err)), e.g. to tell a bad token (401,
// UNAUTHENTICATED) from one lacking scope (403, PERMISSION_DENIED), both
// AuthFailed. Only the HTTP client reads the audit trail (Audit): the gRPC
// service has no audit call.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/api/wire"
	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
)

// Locks is the lock API as both clients offer it: what *Client and
// *GRPCClient have in common, for code that works over either.
type Locks interface {
	lock.Locker
	// AcquireWait asks the gateway to retry on contention for up to wait.
	AcquireWait(ctx context.Context, key string, ttl, wait time.Duration) (lock.Acquired, error)
	// IsLocked reports whether key has a live lock.
	IsLocked(ctx context.Context, key string) (bool, error)
	// LookupKey returns the sanitised live lock on key, or nil.
	LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error)
	// LookupLockID returns the sanitised live lock lockID holds, or nil.
	LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error)
	// Lock runs fn while holding the lock on key (lock.Lock).
	Lock(ctx context.Context, key string, fn func(context.Context, lock.Held) error, opts ...lock.LockOption) error
}

// Client talks to one fencegate gateway over HTTP/JSON. It is safe for
// concurrent use.
type Client struct {
	base *url.URL
	http *http.Client
	opts *options
}

var _ Locks = (*Client)(nil)

// idleConnsPerHost is how many idle keep-alive connections New's own HTTP
// client keeps to the gateway. Each Client has its own pool: make one and
// share it (it is safe for concurrent use), rather than one per call.
const idleConnsPerHost = 64

// New returns a client for the gateway at baseURL (e.g.
// http://127.0.0.1:8080, or https://… with TLS). It does no I/O. Its own
// HTTP client keeps up to 64 idle connections to the gateway: create one
// Client and share it. It fails
// with InvalidArgument on a malformed URL, on a token that would travel in
// plaintext to a host that is not loopback (see WithToken), and on options
// that do not fit (WithTLSConfig or WithCAFile with an http:// URL or with
// WithHTTPClient; WithDialOptions).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, invalidOption("base URL %q must be http(s)://host:port", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	o := buildOptions(opts)
	if len(o.dialOptions) > 0 {
		return nil, invalidOption("WithDialOptions is for NewGRPC")
	}
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	hc := o.httpClient
	switch {
	case tlsCfg != nil && u.Scheme != "https":
		return nil, invalidOption("TLS options need an https:// URL, not %q", u.Scheme+"://")
	case tlsCfg != nil && hc != nil:
		return nil, invalidOption("WithHTTPClient and TLS options conflict: set TLS on the *http.Client")
	case hc == nil:
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tlsCfg
		// http.DefaultTransport keeps 2 idle connections per host: a
		// program acquiring and releasing from more goroutines than that
		// would open (and leave in TIME_WAIT) a connection per request.
		tr.MaxIdleConnsPerHost = idleConnsPerHost
		hc = &http.Client{Transport: tr}
	}
	if err := o.checkToken(u.Hostname(), u.Scheme == "https"); err != nil {
		return nil, err
	}
	return &Client{base: u, http: hc, opts: o}, nil
}

// HTTPClient is the *http.Client the client sends with (its TLS settings
// included), for callers that speak to other gateway endpoints.
func (c *Client) HTTPClient() *http.Client { return c.http }

// Token is the bearer token the client sends ("" if none).
func (c *Client) Token() string { return c.opts.token }

// Acquire tries once to take the lock on key for ttl (0 means the server's
// default, 30 s).
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Acquired, error) {
	return c.AcquireWait(ctx, key, ttl, 0)
}

// AcquireWait asks the server to retry on contention for up to wait, with
// the spec's backoff and jitter, before answering "locked".
func (c *Client) AcquireWait(ctx context.Context, key string, ttl, wait time.Duration) (lock.Acquired, error) {
	ttlMs, waitMs, err := acquireParams(ttl, wait)
	if err != nil {
		return lock.Acquired{}, err
	}
	var out wire.AcquireReply
	status, err := c.do(ctx, wait, "acquire", http.MethodPost, wire.PathAcquire, wire.AcquireRequest{Key: key, TTLMs: ttlMs, WaitMs: waitMs}, &out, http.StatusConflict)
	if err != nil {
		return lock.Acquired{}, err
	}
	if status == http.StatusConflict {
		return lock.Acquired{AcquireResult: lockstore.AcquireResult{OK: false, Reason: lockstore.ReasonLocked}}, nil
	}
	return lock.Acquired{AcquireResult: lockstore.AcquireResult{OK: out.OK, LockID: out.LockID, Fence: out.Fence, ExpiresAtMs: out.ExpiresAtMs}, Proof: out.Proof}, nil
}

// Release drops the lock lockID holds; OK is false if it was already gone.
func (c *Client) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	var out wire.OKReply
	status, err := c.do(ctx, 0, "release", http.MethodPost, wire.PathRelease, wire.ReleaseRequest{LockID: lockID}, &out, http.StatusNotFound)
	if err != nil {
		return lockstore.ReleaseResult{}, err
	}
	return lockstore.ReleaseResult{OK: status == http.StatusOK && out.OK}, nil
}

// Extend sets the lock's expiry to now+ttl and returns the new expiry.
func (c *Client) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	ms, err := extendParams(lockID, ttl)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	var out wire.OKReply
	status, err := c.do(ctx, 0, "extend", http.MethodPost, wire.PathExtend, wire.ExtendRequest{LockID: lockID, TTLMs: &ms}, &out, http.StatusNotFound)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	if status != http.StatusOK || !out.OK {
		return lockstore.ExtendResult{OK: false}, nil
	}
	return lockstore.ExtendResult{OK: true, ExpiresAtMs: out.ExpiresAtMs}, nil
}

// LookupKey returns the sanitised live lock on key, or nil.
func (c *Client) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	return c.lookup(ctx, wire.LookupRequest{Key: &key})
}

// LookupLockID returns the sanitised live lock lockID holds, or nil.
func (c *Client) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return nil, err
	}
	return c.lookup(ctx, wire.LookupRequest{LockID: &lockID})
}

func (c *Client) lookup(ctx context.Context, body wire.LookupRequest) (*lockstore.LockInfo, error) {
	var info lockstore.LockInfo
	status, err := c.do(ctx, 0, "lookup", http.MethodPost, wire.PathLookup, body, &info, http.StatusNotFound)
	if err != nil || status == http.StatusNotFound {
		return nil, err
	}
	return &info, nil
}

// IsLocked reports whether key has a live lock.
func (c *Client) IsLocked(ctx context.Context, key string) (bool, error) {
	var out wire.StatusReply
	_, err := c.do(ctx, 0, "status", http.MethodGet, wire.PathStatus+"?key="+url.QueryEscape(key), nil, &out)
	return out.Locked, err
}

// AuditQuery selects audit events for Audit.
type AuditQuery struct {
	Key   string    // raw key; the server matches its digest (lockstore.KeyDigest)
	Since time.Time // zero: no lower bound
	Limit int       // 0: the server's default
}

// Audit returns audit events, newest first.
func (c *Client) Audit(ctx context.Context, q AuditQuery) ([]lockstore.AuditEvent, error) {
	v := url.Values{}
	if q.Key != "" {
		v.Set("key", q.Key)
	}
	if !q.Since.IsZero() {
		v.Set("since", strconv.FormatInt(q.Since.UnixMilli(), 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	path := wire.PathAudit
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out wire.AuditReply
	_, err := c.do(ctx, 0, "audit", http.MethodGet, path, nil, &out)
	return out.Events, err
}

// Lock runs fn while holding the lock on key: lock.Lock over this
// client, with the same options (TTL, retry, auto-extend, release errors).
func (c *Client) Lock(ctx context.Context, key string, fn func(context.Context, lock.Held) error, opts ...lock.LockOption) error {
	return lock.Lock(ctx, c, key, fn, opts...)
}

// maxResponse bounds what we read from a server (audit pages are the largest).
const maxResponse = 8 << 20

// do sends one call, bounded by WithTimeout plus extra (the time the
// gateway may wait for the lock). okStatuses beyond 200 are domain outcomes
// decoded into out; any other status is turned into a *lockstore.Error.
func (c *Client) do(ctx context.Context, extra time.Duration, op, method, path string, body any, out any, okStatuses ...int) (int, error) {
	ctx, cancel := c.opts.callContext(ctx, extra)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, &lockstore.Error{Code: lockstore.InvalidArgument, Op: op, Msg: "encode request", Err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return 0, &lockstore.Error{Code: lockstore.InvalidArgument, Op: op, Msg: "build request", Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.opts.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, transportError(ctx, op, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return 0, transportError(ctx, op, err)
	}
	ok := resp.StatusCode == http.StatusOK
	for _, s := range okStatuses {
		ok = ok || resp.StatusCode == s
	}
	if !ok {
		return resp.StatusCode, statusError(op, resp.StatusCode, raw)
	}
	if out != nil && len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: fmt.Sprintf("decode %d response", resp.StatusCode), Err: err}
		}
	}
	return resp.StatusCode, nil
}

// transportError classifies a failed round trip: the caller's context first,
// then timeouts, then everything else as the gateway being unavailable.
func transportError(ctx context.Context, op string, err error) error {
	if ce := lockstore.ContextError(ctx, op); ce != nil {
		ce.Err = err
		return ce
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return &lockstore.Error{Code: lockstore.NetworkTimeout, Op: op, Msg: "gateway timed out", Err: err}
	}
	return &lockstore.Error{Code: lockstore.ServiceUnavailable, Op: op, Msg: "gateway unreachable", Err: err}
}

// statusError turns an error response into a *lockstore.Error, trusting the
// body's code when it is one of ours and the status otherwise.
func statusError(op string, status int, raw []byte) error {
	var body wire.ErrorReply
	_ = json.Unmarshal(raw, &body)
	code := body.Error.Code
	if !wire.KnownCode(code) {
		code = wire.CodeForStatus(status)
	}
	msg := body.Error.Message
	if msg == "" {
		msg = "gateway answered an error"
	}
	return &lockstore.Error{Code: code, Op: op, Msg: msg, Err: &HTTPStatusError{StatusCode: status}}
}

// HTTPStatusError is the cause of a *lockstore.Error the HTTP client builds
// from an error answer: the status the gateway (or a proxy) sent. Branch on
// the LockError code; the status tells apart what one code covers, such as
// 401 (no or a bad token) and 403 (a token lacking scope), both AuthFailed.
type HTTPStatusError struct {
	StatusCode int
}

func (e *HTTPStatusError) Error() string { return fmt.Sprintf("HTTP %d", e.StatusCode) }
