package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/lockstore"
)

// timeoutErr is a net.Error that timed out, as a socket deadline reports.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func pgErr(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "x"} }

func TestClassify(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()

	opErr := func(e error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", e)}
	}

	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want lockstore.Code
	}{
		{"serialization_failure", live, pgErr("40001"), lockstore.ServiceUnavailable},
		{"deadlock_detected", live, pgErr("40P01"), lockstore.ServiceUnavailable},
		{"invalid_authorization", live, pgErr("28000"), lockstore.AuthFailed},
		{"invalid_password", live, pgErr("28P01"), lockstore.AuthFailed},
		{"insufficient_privilege", live, pgErr("42501"), lockstore.AuthFailed},
		{"too_many_connections", live, pgErr("53300"), lockstore.RateLimited},
		{"insufficient_resources", live, pgErr("53000"), lockstore.ServiceUnavailable},
		{"disk_full", live, pgErr("53100"), lockstore.ServiceUnavailable},
		{"out_of_memory", live, pgErr("53200"), lockstore.ServiceUnavailable},
		{"admin_shutdown", live, pgErr("57P01"), lockstore.ServiceUnavailable},
		{"crash_shutdown", live, pgErr("57P02"), lockstore.ServiceUnavailable},
		{"cannot_connect_now", live, pgErr("57P03"), lockstore.ServiceUnavailable},
		{"connection_exception", live, pgErr("08006"), lockstore.ServiceUnavailable},
		{"connection_does_not_exist", live, pgErr("08003"), lockstore.ServiceUnavailable},
		{"read_only (standby)", live, pgErr("25006"), lockstore.ServiceUnavailable},
		{"statement_timeout", live, pgErr("57014"), lockstore.NetworkTimeout},
		{"query_canceled, ctx cancelled", cancelled, pgErr("57014"), lockstore.Aborted},
		{"query_canceled, ctx deadline", expired, pgErr("57014"), lockstore.NetworkTimeout},
		{"lock_timeout", live, pgErr("55P03"), lockstore.NetworkTimeout},
		{"undefined_table", live, pgErr("42P01"), lockstore.Internal},
		{"undefined_column", live, pgErr("42703"), lockstore.Internal},
		{"data_exception", live, pgErr("22001"), lockstore.InvalidArgument},
		{"unique_violation", live, pgErr("23505"), lockstore.InvalidArgument},
		{"syntax_error", live, pgErr("42601"), lockstore.Internal},
		{"unknown sqlstate", live, pgErr("XX000"), lockstore.Internal},
		{"wrapped pg error", live, fmt.Errorf("batch: %w", pgErr("40001")), lockstore.ServiceUnavailable},
		{"connection refused", live, opErr(syscall.ECONNREFUSED), lockstore.ServiceUnavailable},
		{"connection reset", live, opErr(syscall.ECONNRESET), lockstore.ServiceUnavailable},
		{"broken pipe", live, opErr(syscall.EPIPE), lockstore.ServiceUnavailable},
		{"host unreachable", live, opErr(syscall.EHOSTUNREACH), lockstore.ServiceUnavailable},
		{"unexpected EOF", live, fmt.Errorf("read: %w", io.ErrUnexpectedEOF), lockstore.ServiceUnavailable},
		{"EOF", live, io.EOF, lockstore.ServiceUnavailable},
		{"closed network conn", live, fmt.Errorf("write: %w", net.ErrClosed), lockstore.ServiceUnavailable},
		{"socket timeout", live, &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, lockstore.NetworkTimeout},
		{"connect_timeout (not the caller's deadline)", live, fmt.Errorf("dial: %w", context.DeadlineExceeded), lockstore.NetworkTimeout},
		{"caller cancelled, driver error", cancelled, io.ErrUnexpectedEOF, lockstore.Aborted},
		{"caller deadline, driver error", expired, opErr(syscall.ECONNREFUSED), lockstore.NetworkTimeout},
		{"pool closed under us", live, fmt.Errorf("acquire: %w", context.Canceled), lockstore.ServiceUnavailable},
		{"unknown", live, errors.New("something odd"), lockstore.Internal},
		{"already a lockstore error", live, lockstore.Errorf(lockstore.RateLimited, "x", "y"), lockstore.RateLimited},
	} {
		got := classify(c.ctx, "op", c.err)
		if code := lockstore.CodeOf(got); code != c.want {
			t.Errorf("%s: classify(%v) = %s (%v), want %s", c.name, c.err, code, got, c.want)
		}
		if !errors.Is(got, c.err) && !errors.Is(got, context.Canceled) && !errors.Is(got, context.DeadlineExceeded) {
			t.Errorf("%s: classify dropped the cause from the chain: %v", c.name, got)
		}
	}
	if classify(live, "op", nil) != nil {
		t.Error("classify(nil) != nil")
	}
	if got := classify(live, "op", pgErr("42P01")); !strings.Contains(got.Error(), "migrate") {
		t.Errorf("undefined_table error does not say to run migrate: %v", got)
	}
}
