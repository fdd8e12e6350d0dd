package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// classify maps a driver error to the lock contract's *lockstore.Error
// through backend.MapError: a done caller's context decides first,
// whatever words the driver used; classifyCause maps the rest.
func classify(ctx context.Context, op string, err error) error {
	return backend.MapError(ctx, op, err, func(err error) *lockstore.Error {
		code, msg := classifyCause(err)
		return &lockstore.Error{Code: code, Msg: msg, Err: err}
	})
}

// classifyCause is the context-free part of classify: the code and a short
// message for err.
func classifyCause(err error) (lockstore.Code, string) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return classifySQLState(pe.Code)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err), isNetTimeout(err):
		// A deadline that is not the caller's: connect_timeout, a ping
		// timeout, a socket deadline.
		return lockstore.NetworkTimeout, "timed out talking to PostgreSQL"
	case errors.Is(err, context.Canceled):
		// Not the caller's context (classify checked it): the pool or a
		// connection was shut down under the operation.
		return lockstore.ServiceUnavailable, "connection cancelled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return lockstore.ServiceUnavailable, "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return lockstore.ServiceUnavailable, "connection lost"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.ECONNABORTED):
		return lockstore.ServiceUnavailable, "server unreachable"
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		// Any other failure to establish a connection (DNS, TLS
		// handshake): the server is not usable right now.
		return lockstore.ServiceUnavailable, "cannot connect to PostgreSQL"
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return lockstore.ServiceUnavailable, "network error"
	}
	// pgconn reports a connection that died mid-protocol with these texts
	// and no typed cause in some paths (e.g. a conn already marked closed).
	if s := err.Error(); strings.Contains(s, "conn closed") || strings.Contains(s, "conn busy") {
		return lockstore.ServiceUnavailable, "connection unusable"
	}
	return lockstore.Internal, "unexpected PostgreSQL driver error"
}

// classifySQLState maps a server-reported SQLSTATE.
func classifySQLState(state string) (lockstore.Code, string) {
	switch state {
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return lockstore.ServiceUnavailable, "transaction conflict (transient, retry)"
	case "53300": // too_many_connections
		return lockstore.RateLimited, "server has too many connections"
	case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
		return lockstore.ServiceUnavailable, "server is shutting down or starting up"
	case "57014": // query_canceled: statement_timeout (the caller's ctx was checked first)
		return lockstore.NetworkTimeout, "statement cancelled by the server (statement_timeout)"
	case "55P03": // lock_not_available: lock_timeout
		return lockstore.NetworkTimeout, "lock wait timed out on the server (lock_timeout)"
	case "25006": // read_only_sql_transaction: a standby answered, e.g. mid-failover
		return lockstore.ServiceUnavailable, "server is read-only (standby or failover in progress)"
	case "42P01", "42703": // undefined_table, undefined_column
		return lockstore.Internal, "lock tables are missing or outdated: run `fencegate migrate` (or enable autoMigrate)"
	case "42501": // insufficient_privilege
		return lockstore.AuthFailed, "permission denied on the lock tables"
	}
	switch {
	case strings.HasPrefix(state, "28"): // invalid_authorization_specification, invalid_password
		return lockstore.AuthFailed, "authentication failed"
	case strings.HasPrefix(state, "08"): // connection_exception
		return lockstore.ServiceUnavailable, "connection failure"
	case strings.HasPrefix(state, "53"): // insufficient_resources, disk_full, out_of_memory
		return lockstore.ServiceUnavailable, "server is out of resources"
	case strings.HasPrefix(state, "22"): // data_exception
		return lockstore.InvalidArgument, "data rejected by the server"
	case strings.HasPrefix(state, "23"): // integrity_constraint_violation
		return lockstore.InvalidArgument, "integrity constraint violated"
	}
	return lockstore.Internal, "unexpected PostgreSQL error " + state
}

// isNetTimeout reports a net.Error that timed out.
func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
