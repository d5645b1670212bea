package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shareq/shareq/handler"
)

func TestOutageClassification(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code} }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"connect error", &pgconn.ConnectError{Config: &pgconn.Config{}}, true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), true},
		{"unexpected EOF", fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF), true},
		{"conn closed", fmt.Errorf("begin: %w", pgconn.ErrConnClosed), true},
		{"net closed", fmt.Errorf("read: %w", net.ErrClosed), true},
		{"08006 connection_failure", pg("08006"), true},
		{"08P01 protocol_violation", pg("08P01"), true},
		{"57P01 admin_shutdown", pg("57P01"), true},
		{"57P02 crash_shutdown", pg("57P02"), true},
		{"57P03 cannot_connect_now", pg("57P03"), true},
		{"53300 too_many_connections", pg("53300"), true},
		{"25006 read_only_sql_transaction", fmt.Errorf("claim: %w", pg("25006")), true},
		{"23505 unique_violation", pg("23505"), false},
		{"42601 syntax_error", pg("42601"), false},
		{"42P01 undefined_table", pg("42P01"), false},
		{"40001 serialization_failure", pg("40001"), false},
		{"57014 query_canceled (statement timeout)", pg("57014"), false},
		{"tx commit rollback", pgx.ErrTxCommitRollback, false},
		{"plain", errors.New("bad row"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := outage(tt.err); got != tt.want {
				t.Fatalf("outage(%v) = %v, want %v", tt.err, got, tt.want)
			}
			err := unavailable(t.Context(), nil, tt.err)
			var u *handler.UnavailableError
			if got := errors.As(err, &u); got != tt.want || (got && (u.Dependency != Dependency || !errors.Is(err, tt.err))) {
				t.Fatalf("unavailable(%v) = %v, want unavailable %v wrapping it", tt.err, err, tt.want)
			}
		})
	}
}

func TestUnavailableLeavesSomeErrorsAlone(t *testing.T) {
	t.Parallel()
	refused := fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := unavailable(ctx, nil, refused); err != refused {
		t.Errorf("with the job's context done: %v, want the error unchanged (the job was cancelled)", err)
	}
	perm := handler.Permanent(refused)
	if err := unavailable(t.Context(), nil, perm); err != perm {
		t.Errorf("permanent: %v, want it unchanged", err)
	}
	if err := unavailable(t.Context(), nil, nil); err != nil {
		t.Errorf("nil: %v", err)
	}
}
