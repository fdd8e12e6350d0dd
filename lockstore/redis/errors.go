package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// classify turns a go-redis failure into the contract's *Error through
// backend.MapError: a done caller's context decides first, whatever the
// driver made of it; codeFor maps the rest.
func classify(ctx context.Context, op string, err error) *lockstore.Error {
	var le *lockstore.Error
	errors.As(backend.MapError(ctx, op, err, func(err error) *lockstore.Error {
		code, msg := codeFor(err)
		return &lockstore.Error{Code: code, Msg: msg, Err: err}
	}), &le)
	return le
}

// codeFor maps an error from go-redis or the network to a Code and a short
// description. It is a pure function of the error (unit-tested as a table).
//
// Decisions worth stating:
//   - OOM is ServiceUnavailable: the server cannot take writes until an
//     operator acts; backing off as for a throttle would not help.
//   - "max number of clients reached" is RateLimited: the server is up and
//     refusing load, which is what a throttle is. (Redis sends it and closes
//     the connection, so a client that is still writing its handshake often
//     sees only the reset: ServiceUnavailable. Both codes are retryable.)
//   - A full connection pool (ErrPoolTimeout) is ServiceUnavailable: the
//     server is too slow to keep up, not one call's deadline.
//   - A TLS certificate that fails verification is AuthFailed: the server's
//     identity was refused.
func codeFor(err error) (lockstore.Code, string) {
	switch {
	case err == nil:
		return "", ""
	case errors.Is(err, context.Canceled):
		return lockstore.Aborted, "cancelled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return lockstore.NetworkTimeout, "deadline exceeded"
	}

	// go-redis reports an unreachable Sentinel set, or one that does not know
	// the master, with a plain error (wrapping the last reply, often
	// "redis: nil"); its text is the only thing to go on.
	if msg := err.Error(); strings.Contains(msg, "redis: all sentinels") || strings.Contains(msg, "redis: no sentinels") {
		return lockstore.ServiceUnavailable, "no sentinel could name the master"
	}

	// Replies from the server.
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		return redisReplyCode(rerr.Error())
	}

	switch {
	case errors.Is(err, goredis.ErrClosed):
		return lockstore.ServiceUnavailable, "client is closed"
	case errors.Is(err, goredis.ErrPoolTimeout), errors.Is(err, goredis.ErrPoolExhausted):
		return lockstore.ServiceUnavailable, "connection pool exhausted"
	}

	var cve *tls.CertificateVerificationError
	var uae x509.UnknownAuthorityError
	var hne x509.HostnameError
	var cie x509.CertificateInvalidError
	if errors.As(err, &cve) || errors.As(err, &uae) || errors.As(err, &hne) || errors.As(err, &cie) {
		return lockstore.AuthFailed, "server TLS certificate rejected"
	}

	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		return lockstore.NetworkTimeout, "network timeout"
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return lockstore.ServiceUnavailable, "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return lockstore.ServiceUnavailable, "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return lockstore.ServiceUnavailable, "host unreachable"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return lockstore.ServiceUnavailable, "connection closed"
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(err, &opErr) || errors.As(err, &dnsErr) {
		return lockstore.ServiceUnavailable, "network error"
	}
	var tlsRec tls.RecordHeaderError
	if errors.As(err, &tlsRec) {
		return lockstore.ServiceUnavailable, "TLS handshake failed (is the server speaking TLS?)"
	}
	return lockstore.Internal, "unexpected error"
}

// replyCodes maps the first word of an error reply. go-redis hands error
// replies over as values whose text is the server's message, so the message
// is what there is to classify.
var replyCodes = map[string]struct {
	code lockstore.Code
	msg  string
}{
	"NOAUTH":      {lockstore.AuthFailed, "server refused the credentials"},
	"WRONGPASS":   {lockstore.AuthFailed, "server refused the credentials"},
	"NOPERM":      {lockstore.AuthFailed, "the Redis user lacks a permission"},
	"LOADING":     {lockstore.ServiceUnavailable, "server is loading its dataset"},
	"BUSY":        {lockstore.ServiceUnavailable, "server is busy running a script"},
	"TRYAGAIN":    {lockstore.ServiceUnavailable, "server asked to try again"},
	"MASTERDOWN":  {lockstore.ServiceUnavailable, "replica lost its master"},
	"CLUSTERDOWN": {lockstore.ServiceUnavailable, "cluster is down"},
	"READONLY":    {lockstore.ServiceUnavailable, "connected to a read-only replica (failover in progress?)"},
	"NOREPLICAS":  {lockstore.ServiceUnavailable, "not enough replicas"},
	"MISCONF":     {lockstore.ServiceUnavailable, "server cannot persist and refuses writes"},
	"OOM":         {lockstore.ServiceUnavailable, "server is out of memory (maxmemory)"},
}

// redisReplyCode maps an error reply.
func redisReplyCode(msg string) (lockstore.Code, string) {
	word, _, _ := strings.Cut(msg, " ")
	if c, ok := replyCodes[word]; ok {
		return c.code, c.msg
	}
	switch {
	case strings.HasPrefix(msg, "ERR max number of clients reached"):
		return lockstore.RateLimited, "server has reached its client limit"
	case strings.HasPrefix(msg, "ERR AUTH"), strings.HasPrefix(msg, "ERR invalid password"),
		strings.HasPrefix(msg, "ERR Client sent AUTH"), strings.HasPrefix(msg, "ERR invalid username-password"):
		return lockstore.AuthFailed, "server refused the credentials"
	}
	return lockstore.Internal, "unexpected reply from Redis"
}
