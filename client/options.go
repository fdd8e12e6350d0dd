package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"google.golang.org/grpc"
)

// Option configures a client. WithToken, WithTLSConfig, WithCAFile,
// WithTimeout and WithInsecureToken apply to both New and NewGRPC, so one
// option list can build either; WithHTTPClient is New's only and
// WithDialOptions NewGRPC's only (the other constructor refuses them rather
// than ignore them).
type Option func(*options)

// options is what the Options set; each constructor turns it into its
// transport's settings.
type options struct {
	token         string
	tls           *tls.Config // from WithTLSConfig; nil: none given
	caFile        string
	timeout       time.Duration
	insecureToken bool
	httpClient    *http.Client
	dialOptions   []grpc.DialOption
	// isLocal decides which hosts are loopback. It is a field so that the
	// package's tests can run the refusal table against a broken variant.
	isLocal func(host string) bool
}

// WithToken sends token as a bearer token on every call (HTTP
// "Authorization: Bearer …", gRPC "authorization" metadata).
//
// Neither client sends a token in plaintext to a host that is not
// loopback: without TLS (an https:// URL, or WithTLSConfig/WithCAFile for
// gRPC) the constructor fails unless WithInsecureToken is given too.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTLSConfig sets the TLS client configuration (a nil RootCAs means the
// system's roots; the minimum version is raised to TLS 1.2). For gRPC it
// turns TLS on: NewGRPC speaks TLS exactly when this or WithCAFile is
// given, WithTLSConfig(&tls.Config{}) for a gateway with a publicly trusted
// certificate. For HTTP the URL must be https://. The config is cloned.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			cfg = &tls.Config{}
		}
		o.tls = cfg.Clone()
	}
}

// WithCAFile trusts the PEM certificates in file (and only those) to verify
// the gateway; it implies TLS like WithTLSConfig, whose other settings it
// keeps. The file is read by the constructor.
func WithCAFile(file string) Option { return func(o *options) { o.caFile = file } }

// WithTimeout bounds each call (0, the default: only the caller's context
// does). AcquireWait's wait is added to it, so that a long wait is not cut
// short. A call that runs out of time fails with NetworkTimeout.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithInsecureToken allows WithToken's token to be sent without TLS to a
// host that is not loopback: for a network you trust with it, such as a
// service mesh that encrypts between sidecars.
func WithInsecureToken() Option { return func(o *options) { o.insecureToken = true } }

// WithHTTPClient makes New send with hc (its transport, proxy and TLS
// settings) instead of a client of its own (http.DefaultTransport's
// settings, keeping up to 64 idle connections to the gateway). It conflicts with
// WithTLSConfig and WithCAFile: configure TLS on hc instead. NewGRPC
// refuses it.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.httpClient = hc } }

// WithDialOptions adds gRPC dial options (keepalive, interceptors, a
// custom dialer, …) after NewGRPC's own. Transport credentials are set by
// NewGRPC from the TLS options; do not pass them here. New refuses it.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

func buildOptions(opts []Option) *options {
	o := &options{isLocal: isLoopbackHost}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// tlsConfig is the TLS configuration the options ask for, or nil for none.
func (o *options) tlsConfig() (*tls.Config, error) {
	if o.tls == nil && o.caFile == "" {
		return nil, nil
	}
	cfg := o.tls
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg = cfg.Clone()
	if cfg.MinVersion < tls.VersionTLS12 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if o.caFile != "" {
		pem, err := os.ReadFile(o.caFile)
		if err != nil {
			return nil, invalidOption("CA file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, invalidOption("CA file %s holds no PEM certificate", o.caFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// checkToken refuses to send the token in plaintext to a host that is not
// loopback, unless WithInsecureToken allowed it. Both constructors call it.
func (o *options) checkToken(host string, secure bool) error {
	if o.token == "" || secure || o.insecureToken || o.isLocal(host) {
		return nil
	}
	return &lockstore.Error{Code: lockstore.InvalidArgument, Op: "client", Err: ErrPlaintextToken,
		Msg: fmt.Sprintf("refusing to send the token without TLS to %q, which is not loopback (use TLS, or WithInsecureToken on a network you trust)", host)}
}

// ErrPlaintextToken is wrapped by the error a constructor returns when it
// refuses to send a token without TLS to a host that is not loopback.
var ErrPlaintextToken = errors.New("client: token without TLS to a remote host")

// callContext bounds one call by WithTimeout, plus extra (AcquireWait's wait).
func (o *options) callContext(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	if o.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, o.timeout+extra)
}

// isLoopbackHost reports whether host (a name or an IP, brackets allowed)
// is this machine: "localhost" (RFC 6761 keeps it there) or a loopback IP.
// Other names are not resolved: what they resolve to can change.
func isLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func invalidOption(format string, args ...any) error {
	return &lockstore.Error{Code: lockstore.InvalidArgument, Op: "client", Msg: fmt.Sprintf(format, args...)}
}

// acquireParams validates an acquire's ttl (0: the server's default) and
// wait before any I/O, as both clients send them.
func acquireParams(ttl, wait time.Duration) (ttlMs, waitMs *int64, err error) {
	if ttl != 0 {
		ms, err := lockstore.ValidateTTL(ttl)
		if err != nil {
			return nil, nil, err
		}
		ttlMs = &ms
	}
	if wait > 0 {
		ms := wait.Milliseconds()
		waitMs = &ms
	}
	return ttlMs, waitMs, nil
}

// extendParams validates an extend's lockId and ttl before any I/O.
func extendParams(lockID string, ttl time.Duration) (ttlMs int64, err error) {
	if err := lockstore.ValidateLockID(lockID); err != nil {
		return 0, err
	}
	return lockstore.ValidateTTL(ttl)
}
