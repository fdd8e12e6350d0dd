package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lockstore"
)

// replyErr is an error reply as go-redis hands it over: a value marked with
// RedisError() whose text is the server's message.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

var _ goredis.Error = replyErr("")

func reply(msg string) error { return fmt.Errorf("evalsha: %w", replyErr(msg)) }

func TestCodeFor(t *testing.T) {
	dialRefused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	readReset := &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}
	ioTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	cases := []struct {
		name string
		err  error
		want lockstore.Code
	}{
		{"context canceled", context.Canceled, lockstore.Aborted},
		{"wrapped context canceled", fmt.Errorf("eval: %w", context.Canceled), lockstore.Aborted},
		{"context deadline", context.DeadlineExceeded, lockstore.NetworkTimeout},
		{"i/o timeout", ioTimeout, lockstore.NetworkTimeout},
		{"dial timeout", &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}, lockstore.NetworkTimeout},
		{"connection refused", dialRefused, lockstore.ServiceUnavailable},
		{"connection reset", readReset, lockstore.ServiceUnavailable},
		{"broken pipe", &net.OpError{Op: "write", Err: syscall.EPIPE}, lockstore.ServiceUnavailable},
		{"EOF", io.EOF, lockstore.ServiceUnavailable},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), lockstore.ServiceUnavailable},
		{"use of closed connection", net.ErrClosed, lockstore.ServiceUnavailable},
		{"client closed", goredis.ErrClosed, lockstore.ServiceUnavailable},
		{"pool timeout", goredis.ErrPoolTimeout, lockstore.ServiceUnavailable},
		{"dns", &net.DNSError{Err: "no such host", Name: "redis.invalid"}, lockstore.ServiceUnavailable},
		{"sentinels unreachable", errors.New("redis: all sentinels specified in configuration are unreachable"), lockstore.ServiceUnavailable},
		{"sentinel does not know the master", fmt.Errorf("ping: %w", fmt.Errorf("redis: all sentinels specified in configuration are unreachable: %w", replyErr("redis: nil"))), lockstore.ServiceUnavailable},
		{"tls unknown authority", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, lockstore.AuthFailed},
		{"tls to plain server", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, lockstore.ServiceUnavailable},
		{"NOAUTH", reply("NOAUTH Authentication required."), lockstore.AuthFailed},
		{"WRONGPASS", reply("WRONGPASS invalid username-password pair or user is disabled."), lockstore.AuthFailed},
		{"NOPERM", reply("NOPERM User u has no permissions to run the 'evalsha' command"), lockstore.AuthFailed},
		{"AUTH without password", reply("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"), lockstore.AuthFailed},
		{"LOADING", reply("LOADING Redis is loading the dataset in memory"), lockstore.ServiceUnavailable},
		{"BUSY", reply("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), lockstore.ServiceUnavailable},
		{"TRYAGAIN", reply("TRYAGAIN Multiple keys request during rehashing of slot"), lockstore.ServiceUnavailable},
		{"MASTERDOWN", reply("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), lockstore.ServiceUnavailable},
		{"READONLY", reply("READONLY You can't write against a read only replica."), lockstore.ServiceUnavailable},
		{"MISCONF", reply("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), lockstore.ServiceUnavailable},
		{"OOM", reply("OOM command not allowed when used memory > 'maxmemory'."), lockstore.ServiceUnavailable},
		{"max clients", reply("ERR max number of clients reached"), lockstore.RateLimited},
		{"WRONGTYPE", reply("WRONGTYPE Operation against a key holding the wrong kind of value"), lockstore.Internal},
		{"script error", reply("ERR user_script:1: Script attempted to access nonexistent global variable 'x'"), lockstore.Internal},
		{"NOSCRIPT leaking through", goredis.ErrNoScript, lockstore.Internal},
		{"anything else", errors.New("surprise"), lockstore.Internal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, msg := codeFor(c.err)
			if got != c.want {
				t.Fatalf("codeFor(%v) = %s (%s), want %s", c.err, got, msg, c.want)
			}
			if msg == "" {
				t.Errorf("codeFor(%v) gave no description", c.err)
			}
		})
	}
}

// TestClassifyContextWins: a done context decides the code whatever the
// driver reported, and the driver's error stays in the chain.
func TestClassifyContextWins(t *testing.T) {
	cause := &net.OpError{Op: "read", Err: syscall.ECONNRESET}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	e := classify(cancelled, "acquire", cause)
	if e.Code != lockstore.Aborted || !errors.Is(e, cause) {
		t.Errorf("classify(cancelled ctx) = %v, want Aborted wrapping the cause", e)
	}

	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	<-expired.Done()
	if e := classify(expired, "acquire", cause); e.Code != lockstore.NetworkTimeout {
		t.Errorf("classify(expired ctx) = %v, want NetworkTimeout", e)
	}

	if e := classify(context.Background(), "release", cause); e.Code != lockstore.ServiceUnavailable || e.Op != "release" {
		t.Errorf("classify(live ctx, reset) = %+v, want ServiceUnavailable for op release", e)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
