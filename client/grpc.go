package client

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"time"

	fencegatev1 "github.com/fencegate/fencegate/api/proto/fencegate/v1"
	"github.com/fencegate/fencegate/api/wire"
	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// GRPCClient talks to one fencegate gateway over gRPC (fencegate.v1.Locks).
// It has the HTTP client's lock methods with the same results and error
// codes, and no Audit (the gRPC service has none). It is safe for
// concurrent use; Close it when done.
type GRPCClient struct {
	conn   *grpc.ClientConn
	locks  fencegatev1.LocksClient
	opts   *options
	closed atomic.Bool
}

var _ Locks = (*GRPCClient)(nil)

// NewGRPC returns a client for the gateway's gRPC listener at target, a
// gRPC target such as "127.0.0.1:9090", "dns:///fencegate.example:9090" or
// "unix:///run/fencegate.sock". It speaks TLS when WithTLSConfig or
// WithCAFile is given, plaintext otherwise. It does no I/O: the connection
// is made by the first call, and a gateway that cannot be reached fails
// that call with ServiceUnavailable.
//
// It fails with InvalidArgument on an empty target, on a token that would
// travel in plaintext to a host that is not loopback (see WithToken), and
// on WithHTTPClient.
func NewGRPC(target string, opts ...Option) (*GRPCClient, error) {
	if strings.TrimSpace(target) == "" {
		return nil, invalidOption("gRPC target must not be empty")
	}
	o := buildOptions(opts)
	if o.httpClient != nil {
		return nil, invalidOption("WithHTTPClient is for New")
	}
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	host, local := targetHost(target)
	if err := o.checkToken(host, tlsCfg != nil || local); err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.token != "" {
		// With TLS, gRPC itself also refuses to attach the token to a
		// connection that is not private (defence in depth).
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{token: o.token, requireTLS: tlsCfg != nil}))
	}
	conn, err := grpc.NewClient(target, append(dial, o.dialOptions...)...)
	if err != nil {
		return nil, invalidOption("gRPC target %q: %v", target, err)
	}
	return &GRPCClient{conn: conn, locks: fencegatev1.NewLocksClient(conn), opts: o}, nil
}

// Conn is the connection the client calls on, for callers that use other
// services on the gateway's gRPC listener (grpc.health.v1).
func (c *GRPCClient) Conn() *grpc.ClientConn { return c.conn }

// Token is the bearer token the client sends ("" if none).
func (c *GRPCClient) Token() string { return c.opts.token }

// Close closes the connection; calls made after it fail.
func (c *GRPCClient) Close() error {
	c.closed.Store(true)
	return c.conn.Close()
}

// Acquire tries once to take the lock on key for ttl (0 means the server's
// default, 30 s).
func (c *GRPCClient) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Acquired, error) {
	return c.AcquireWait(ctx, key, ttl, 0)
}

// AcquireWait asks the server to retry on contention for up to wait, with
// the spec's backoff and jitter, before answering "locked".
func (c *GRPCClient) AcquireWait(ctx context.Context, key string, ttl, wait time.Duration) (lock.Acquired, error) {
	ttlMs, waitMs, err := acquireParams(ttl, wait)
	if err != nil {
		return lock.Acquired{}, err
	}
	ctx, cancel := c.opts.callContext(ctx, wait)
	defer cancel()
	r, err := c.locks.Acquire(ctx, &fencegatev1.AcquireRequest{Key: key, TtlMs: ttlMs, WaitMs: waitMs})
	if err != nil {
		return lock.Acquired{}, c.grpcError(ctx, "acquire", err)
	}
	if !r.GetOk() {
		return lock.Acquired{AcquireResult: lockstore.AcquireResult{OK: false, Reason: lockstore.ReasonLocked}}, nil
	}
	return lock.Acquired{AcquireResult: lockstore.AcquireResult{OK: true, LockID: r.GetLockId(), Fence: r.GetFence(), ExpiresAtMs: r.GetExpiresAtMs()}, Proof: r.GetProof()}, nil
}

// Release drops the lock lockID holds; OK is false if it was already gone.
func (c *GRPCClient) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return lockstore.ReleaseResult{}, err
	}
	ctx, cancel := c.opts.callContext(ctx, 0)
	defer cancel()
	r, err := c.locks.Release(ctx, &fencegatev1.ReleaseRequest{LockId: lockID})
	if err != nil {
		return lockstore.ReleaseResult{}, c.grpcError(ctx, "release", err)
	}
	return lockstore.ReleaseResult{OK: r.GetOk()}, nil
}

// Extend sets the lock's expiry to now+ttl and returns the new expiry.
func (c *GRPCClient) Extend(ctx context.Context, lockID string, ttl time.Duration) (lockstore.ExtendResult, error) {
	ms, err := extendParams(lockID, ttl)
	if err != nil {
		return lockstore.ExtendResult{}, err
	}
	ctx, cancel := c.opts.callContext(ctx, 0)
	defer cancel()
	r, err := c.locks.Extend(ctx, &fencegatev1.ExtendRequest{LockId: lockID, TtlMs: &ms})
	if err != nil {
		return lockstore.ExtendResult{}, c.grpcError(ctx, "extend", err)
	}
	if !r.GetOk() {
		return lockstore.ExtendResult{OK: false}, nil
	}
	return lockstore.ExtendResult{OK: true, ExpiresAtMs: r.GetExpiresAtMs()}, nil
}

// LookupKey returns the sanitised live lock on key, or nil.
func (c *GRPCClient) LookupKey(ctx context.Context, key string) (*lockstore.LockInfo, error) {
	return c.lookup(ctx, &fencegatev1.LookupRequest{Target: &fencegatev1.LookupRequest_Key{Key: key}})
}

// LookupLockID returns the sanitised live lock lockID holds, or nil.
func (c *GRPCClient) LookupLockID(ctx context.Context, lockID string) (*lockstore.LockInfo, error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return nil, err
	}
	return c.lookup(ctx, &fencegatev1.LookupRequest{Target: &fencegatev1.LookupRequest_LockId{LockId: lockID}})
}

func (c *GRPCClient) lookup(ctx context.Context, req *fencegatev1.LookupRequest) (*lockstore.LockInfo, error) {
	ctx, cancel := c.opts.callContext(ctx, 0)
	defer cancel()
	r, err := c.locks.Lookup(ctx, req)
	if err != nil {
		return nil, c.grpcError(ctx, "lookup", err)
	}
	if !r.GetOk() {
		return nil, nil
	}
	return &lockstore.LockInfo{
		KeyHash:      r.GetKeyHash(),
		LockIDHash:   r.GetLockIdHash(),
		Fence:        r.GetFence(),
		ExpiresAtMs:  r.GetExpiresAtMs(),
		AcquiredAtMs: r.GetAcquiredAtMs(),
	}, nil
}

// IsLocked reports whether key has a live lock.
func (c *GRPCClient) IsLocked(ctx context.Context, key string) (bool, error) {
	ctx, cancel := c.opts.callContext(ctx, 0)
	defer cancel()
	r, err := c.locks.IsLocked(ctx, &fencegatev1.IsLockedRequest{Key: key})
	if err != nil {
		return false, c.grpcError(ctx, "status", err)
	}
	return r.GetLocked(), nil
}

// Lock runs fn while holding the lock on key: lock.Lock over this
// client, with the same options (TTL, retry, auto-extend, release errors).
func (c *GRPCClient) Lock(ctx context.Context, key string, fn func(context.Context, lock.Held) error, opts ...lock.LockOption) error {
	return lock.Lock(ctx, c, key, fn, opts...)
}

// grpcError turns a failed call into a *lockstore.Error, as the HTTP
// client's transportError and statusError do: the call's context decides
// first (Aborted, NetworkTimeout), then the server's LockError code from
// the status's ErrorInfo, then the status code (wire.CodeForGRPC), which
// covers the statuses the gRPC library makes up itself (UNAVAILABLE for a
// gateway it cannot reach). The status stays the cause, so status.Code
// works on the result.
func (c *GRPCClient) grpcError(ctx context.Context, op string, err error) error {
	if ce := lockstore.ContextError(ctx, op); ce != nil {
		ce.Err = err
		return ce
	}
	if c.closed.Load() {
		// gRPC answers CANCELED, which is not the caller's cancellation.
		return &lockstore.Error{Code: lockstore.InvalidArgument, Op: op, Msg: "client is closed", Err: err}
	}
	st, ok := status.FromError(err)
	if !ok {
		return &lockstore.Error{Code: lockstore.Internal, Op: op, Msg: "gRPC call failed", Err: err}
	}
	if code := wire.CodeFromStatus(st); code != "" {
		msg := st.Message()
		if msg == "" {
			msg = "gateway answered an error"
		}
		return &lockstore.Error{Code: code, Op: op, Msg: msg, Err: &grpcStatusError{st: st}}
	}
	code := wire.CodeForGRPC(st.Code())
	msg := "gateway answered an error"
	if code == lockstore.ServiceUnavailable {
		msg = "gateway unreachable"
	}
	return &lockstore.Error{Code: code, Op: op, Msg: msg, Err: err}
}

// grpcStatusError is the cause of an error the gateway answered: its status
// (status.Code and status.FromError find it), printed without repeating the
// message, which the *lockstore.Error already carries.
type grpcStatusError struct{ st *status.Status }

func (e *grpcStatusError) Error() string              { return "gRPC " + e.st.Code().String() }
func (e *grpcStatusError) GRPCStatus() *status.Status { return e.st }

// bearer sends the token as "authorization: Bearer …" metadata.
type bearer struct {
	token      string
	requireTLS bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.requireTLS }

// targetHost extracts the host a gRPC target dials, and reports whether
// the target is local by construction (a Unix socket). Schemes are those
// gRPC resolves by default; an unknown one is parsed like dns, so its host
// is most likely not loopback and a plaintext token is refused.
func targetHost(target string) (host string, local bool) {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return "", true
	}
	endpoint, authority := target, ""
	if i := strings.Index(target, "://"); i > 0 && !strings.Contains(target[:i], "/") {
		// scheme://[authority]/endpoint
		rest := target[i+len("://"):]
		if j := strings.Index(rest, "/"); j >= 0 {
			authority, endpoint = rest[:j], rest[j+1:]
		} else {
			endpoint = rest
		}
	} else {
		for _, scheme := range []string{"dns:", "passthrough:"} {
			endpoint = strings.TrimPrefix(endpoint, scheme)
		}
	}
	host = endpoint
	if h, _, err := net.SplitHostPort(endpoint); err == nil {
		host = h
	}
	if authority != "" && net.ParseIP(strings.Trim(host, "[]")) == nil {
		// A name looked up on a DNS server of the target's choosing may
		// resolve anywhere, "localhost" included: not loopback.
		return target, false
	}
	return host, false
}
