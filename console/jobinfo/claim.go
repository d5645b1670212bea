package jobinfo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shareq/shareq/idempotency/pgstore"
)

// ClaimState is what the claim table of idempotency/pgstore holds for a
// job's claim key.
type ClaimState string

// The claim states.
const (
	ClaimUnknown   ClaimState = "unknown"   // no claim key given: not read
	ClaimNone      ClaimState = "none"      // no row: no run committed, no cancel
	ClaimRan       ClaimState = "ran"       // a run committed its claim
	ClaimCancelled ClaimState = "cancelled" // a cancel (shareq jobs cancel, pgoutbox.Cancel) holds the key
)

// Claim is a job's claim row.
type Claim struct {
	Key   string
	State ClaimState
	// At is when the run claimed the key, or when the job was cancelled;
	// Ago is now less At on Postgres's clock.
	At  time.Time
	Ago time.Duration
}

var claimTable = pgx.Identifier{pgstore.TableDefault}.Sanitize()

// ReadClaim reads the claim row of key from idempotency/pgstore's claim
// table (the one pgoutbox.Cancel writes to); State ClaimUnknown when key
// is "".
func ReadClaim(ctx context.Context, db DB, key string) (Claim, error) {
	c := Claim{Key: key, State: ClaimUnknown}
	if key == "" {
		return c, nil
	}
	var cancelled *time.Time
	var ago float64
	err := db.QueryRow(ctx, `SELECT claimed_at, cancelled_at, extract(epoch FROM now() - coalesce(cancelled_at, claimed_at))::float8
		FROM `+claimTable+` WHERE key = $1`, key).Scan(&c.At, &cancelled, &ago)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		c.State = ClaimNone
		return c, nil
	case err != nil:
		return c, TableHint(fmt.Errorf("read the claim %q: %w", key, err))
	case cancelled != nil:
		c.State, c.At = ClaimCancelled, *cancelled
	default:
		c.State = ClaimRan
	}
	c.Ago = seconds(ago)
	return c, nil
}
