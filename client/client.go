// Package client is fencegate's Go client for the HTTP/JSON lock API.
//
// A *Client implements lockstore.Locker, so the same Lock helper (retries,
// backoff, auto-extend) runs over the network as in-process:
//
//	c, _ := client.New("http://127.0.0.1:8080", client.WithToken(tok))
//	err := c.Lock(ctx, "orders/42", func(ctx context.Context, h lockstore.Held) error {
//		// ctx is cancelled the moment the lock is lost.
//		req, _ := http.NewRequestWithContext(client.WithFence(ctx, h), "PUT", url, body)
//		_, err := fenced.Do(req) // fenced uses client.NewTransport
//		return err
//	}, lockstore.WithAutoExtend())
//
// System failures come back as *lockstore.Error with the server's code, so
// lockstore.CodeOf works on them; contention and absent locks are results.
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
	"github.com/fencegate/fencegate/lockstore"
)

// Client talks to one fencegate gateway. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	http  *http.Client
	token string
}

var _ lockstore.Locker = (*Client)(nil)

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer token" on every call.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc instead of a default client (e.g. for TLS settings).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// New returns a client for the gateway at baseURL (e.g. http://127.0.0.1:8080).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q must be http(s)://host:port", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	c := &Client{base: u, http: &http.Client{Timeout: 0}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// HTTPClient is the *http.Client the client sends with (its TLS settings
// included), for callers that speak to other gateway endpoints.
func (c *Client) HTTPClient() *http.Client { return c.http }

// Token is the bearer token the client sends ("" if none).
func (c *Client) Token() string { return c.token }

// Acquire tries once to take the lock on key for ttl (0 means the server's
// default, 30 s).
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (lockstore.AcquireResult, error) {
	return c.AcquireWait(ctx, key, ttl, 0)
}

// AcquireWait asks the server to retry on contention for up to wait, with
// the spec's backoff and jitter, before answering "locked".
func (c *Client) AcquireWait(ctx context.Context, key string, ttl, wait time.Duration) (lockstore.AcquireResult, error) {
	body := wire.AcquireRequest{Key: key}
	if ttl != 0 {
		ms, err := lockstore.ValidateTTL(ttl)
		if err != nil {
			return lockstore.AcquireResult{}, err
		}
		body.TTLMs = &ms
	}
	if wait > 0 {
		ms := wait.Milliseconds()
		body.WaitMs = &ms
	}
	var out wire.AcquireReply
	status, err := c.do(ctx, "acquire", http.MethodPost, wire.PathAcquire, body, &out, http.StatusConflict)
	if err != nil {
		return lockstore.AcquireResult{}, err
	}
	if status == http.StatusConflict {
		return lockstore.AcquireResult{OK: false, Reason: lockstore.ReasonLocked}, nil
	}
	return lockstore.AcquireResult{OK: out.OK, LockID: out.LockID, Fence: out.Fence, ExpiresAtMs: out.ExpiresAtMs, Proof: out.Proof}, nil
}

// Release drops the lock lockID holds; OK is false if it was already gone.
func (c *Client) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	var out wire.OKReply
	status, err := c.do(ctx, "release", http.MethodPost, wire.PathRelease, wire.ReleaseRequest{LockID: lockID}, &out, http.StatusNotFound)
	if err != nil {
		return lockstore.ReleaseResult{}, err
	}
	return lockstore.ReleaseResult{OK: status == http.StatusOK && out.OK}, nil
}

// Extend sets the lock's expiry to now+ttl and returns the new expiry.
func (c *Client) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return lockstore.ExtendResult{}, err
	}
	ms, err := lockstore.ValidateTTL(ttl)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	var out wire.OKReply
	status, err := c.do(ctx, "extend", http.MethodPost, wire.PathExtend, wire.ExtendRequest{LockID: lockID, TTLMs: &ms}, &out, http.StatusNotFound)
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
	status, err := c.do(ctx, "lookup", http.MethodPost, wire.PathLookup, body, &info, http.StatusNotFound)
	if err != nil || status == http.StatusNotFound {
		return nil, err
	}
	return &info, nil
}

// IsLocked reports whether key has a live lock.
func (c *Client) IsLocked(ctx context.Context, key string) (bool, error) {
	var out wire.StatusReply
	_, err := c.do(ctx, "status", http.MethodGet, wire.PathStatus+"?key="+url.QueryEscape(key), nil, &out)
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
	_, err := c.do(ctx, "audit", http.MethodGet, path, nil, &out)
	return out.Events, err
}

// Lock runs fn while holding the lock on key: lockstore.Lock over this
// client, with the same options (TTL, retry, auto-extend, release errors).
func (c *Client) Lock(ctx context.Context, key string, fn func(context.Context, lockstore.Held) error, opts ...lockstore.LockOption) error {
	return lockstore.Lock(ctx, c, key, fn, opts...)
}

// maxResponse bounds what we read from a server (audit pages are the largest).
const maxResponse = 8 << 20

// do sends one call. okStatuses beyond 200 are domain outcomes decoded into
// out; any other status is turned into a *lockstore.Error.
func (c *Client) do(ctx context.Context, op, method, path string, body any, out any, okStatuses ...int) (int, error) {
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
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
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
		msg = fmt.Sprintf("gateway answered %d", status)
	}
	return &lockstore.Error{Code: code, Op: op, Msg: msg}
}
