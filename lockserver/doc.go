// Package lockserver serves fencegate's lock API over HTTP/JSON and gRPC
// (docs/api.md, "Lock API over HTTP/JSON", "Lock API over gRPC",
// "Operations"), checking bearer tokens with package auth, and lock-op
// metrics.
//
// # Wiring
//
//	authn, err := auth.NewAuthenticator(tokens)     // or nil: auth off (loopback dev mode)
//	srv, err := lockserver.New(lockserver.Options{
//		Store: store, Audit: store, Auth: authn,
//		MaxWait: 30 * time.Second,
//		Registerer: reg, Gatherer: reg, Logger: logger,
//	})
//	mux := http.NewServeMux()
//	srv.Register(mux)                                // /v1/locks/*, /v1/audit, /v1/proof/keys, /metrics
//	mux.Handle("/v1/authz/check/", srv.Middleware(fwd)) // other transports share the listener
//	srv.RegisterGRPC(grpcServer)                     // fencegate.v1.Locks + reflection
//
// Build one Server per process and use it for both transports: they share
// the metrics (registered once, by New) and the authenticator.
// Server.Handler is a ready-made mux with a JSON 404 for unknown paths.
//
// # HTTP decisions docs/api.md leaves open
//
//   - A wrong or missing Content-Type on a POST is 400 InvalidArgument, not
//     415: docs/api.md maps every malformed request to 400, and one status per
//     code keeps clients simple. The charset, if given, must be UTF-8.
//   - A body over 64 KiB, unknown fields, wrong types, anything after the
//     JSON object, a bad lockId, and a lookup with both or neither of key
//     and lockId are all 400 InvalidArgument.
//   - ttlMs, when present, must be a positive integer (absent = 30000 on
//     acquire; required on extend). waitMs must be in [0, MaxWait]; a larger
//     value is 400, not clamped, because a client that asked for 60 s and
//     got "locked" after 30 s would draw the wrong conclusion.
//   - waitMs retries on contention with exponential backoff and equal
//     jitter (lock.AcquireWithRetry, 100 ms base) until the time is
//     spent, then answers 409 locked. The wait runs on the request's
//     context: a client that disconnects stops it at once.
//   - A wrong method is 405 with Allow; an unknown path under /v1/locks/
//     is a JSON 404. Both carry code InvalidArgument. GET /v1/audit
//     without an AuditLog is 501 with code ServiceUnavailable.
//   - GET /v1/audit takes key (optional; matched by its SHA-256 digest,
//     lockstore.KeyDigest, never by the collidable hashKey), since
//     (Unix ms, default 0) and limit (1..1000, default 100); newest first.
//   - Replies are never cached (Cache-Control: no-store): they carry lockIds.
//   - With Options.Proofs, an acquire also answers a signed write proof
//     (HTTP "proof", gRPC AcquireResponse.proof; package writeproof), and
//     GET /v1/proof/keys serves the verifying keys without a token (they
//     are public; cacheable for five minutes); without it that path is 404.
//
// # Auth
//
// Tokens are configured by name with the SHA-256 of the secret, key
// prefixes and operations (see auth.Token). A presented token is hashed and
// compared with every configured digest in constant time. No or an
// unknown token is 401 AuthFailed with WWW-Authenticate: Bearer (gRPC
// UNAUTHENTICATED); a valid token without the operation or the key's
// prefix is 403 AuthFailed (gRPC PERMISSION_DENIED).
//
// Key prefixes bind the key-based operations: acquire, status, lookup by
// key, audit by key (an audit query without a key needs an all-keys
// token). Release, extend and lookup by lockId are authorised by
// operation only: the lockId is itself the capability, proof that its
// holder acquired the lock under a token that covered the key.
//
// An empty Operations list grants the five lock operations but not audit,
// whose events span every key and may carry raw keys; grant "audit" or
// "*" explicitly. Logs name the token, never its secret.
//
// # gRPC
//
// Contention and absent locks are reply fields (ok=false). Failures are
// statuses mapped from the LockError code (docs/api.md), with a
// google.rpc.ErrorInfo detail {Reason: code, Domain: "fencegate.io"};
// CodeFromStatus reads it back. Auth reads the "authorization: Bearer …"
// metadata. The auth, metrics and logging interceptor is built into the
// service that RegisterGRPC registers, so it cannot be forgotten.
// grpc.health.v1 is the caller's: cmd/fencegate's lifecycle
// (internal/health) reports LocksServiceName.
//
// # Operations
//
// /healthz and /readyz are not the lock API's: every listener of the
// process follows one lifecycle (cmd/fencegate, internal/health). Metrics:
// fencegate_lock_ops_total{op,result} (result ok, fail = locked/absent, or
// the LockError code), fencegate_lock_op_duration_seconds{op}, and
// fencegate_locks_held when lockstore.As finds a lockstore.HeldCounter in
// Options.Store (through any wrapper with Unwrap).
// Access logs (Options.AccessLog: by default only requests answered 4xx/5xx,
// a gRPC status other than OK, or slower than SlowRequest) carry method, the
// matched route (never the path or query, which can hold a key), status,
// duration and the token's name; never a key, lockId or token.
package lockserver
