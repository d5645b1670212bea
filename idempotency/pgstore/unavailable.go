package pgstore

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shareq/shareq/handler"
)

// Dependency is the [handler.UnavailableError] dependency of the errors a
// [Store] returns while Postgres is unreachable or failing over.
const Dependency = "postgres"

// unavailable wraps err, a failure of a claim on tx (nil before the
// transaction began), in a [handler.UnavailableError] when it says that
// Postgres itself is out rather than that a statement failed: see
// [outage]. A tx whose connection is closed is an outage whatever the
// error. Nothing is an outage once ctx is done: then the job was
// cancelled or ran past its timeout.
func unavailable(ctx context.Context, tx pgx.Tx, err error) error {
	if err == nil || ctx.Err() != nil || handler.IsUnavailable(err) || handler.IsPermanent(err) {
		return err
	}
	if outage(err) || (tx != nil && tx.Conn() != nil && tx.Conn().IsClosed()) {
		return handler.Unavailable(Dependency, err)
	}
	return err
}

// outage reports whether err says that Postgres is unreachable or
// failing over: a connection that could not be made (any
// *pgconn.ConnectError, refused, reset, timed out, a server that refuses
// connections while it starts or fails over) or that broke (closed,
// reset, EOF, a network timeout), or one of the SQLSTATEs of an outage:
// class 08 (connection exception), 57P01 admin_shutdown, 57P02
// crash_shutdown, 57P03 cannot_connect_now, 53300 too_many_connections
// and 25006 read_only_sql_transaction (a primary that became a standby
// in a failover). Any other server error (a constraint, a syntax error, a
// serialization failure, a statement timeout) is the job's and not an
// outage.
func outage(err error) bool {
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return outageCode(pgErr.Code)
	}
	if errors.Is(err, pgconn.ErrConnClosed) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

// outageCode reports whether SQLSTATE code is one of an outage (see
// [outage]).
func outageCode(code string) bool {
	switch code {
	case "57P01", "57P02", "57P03", "53300", "25006":
		return true
	}
	return strings.HasPrefix(code, "08")
}
