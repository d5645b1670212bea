package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
)

// claimKeyFlags are the flags that name a job's idempotency claim key:
// -claim-key, or -group and -topic (jobs show and jobs cancel).
type claimKeyFlags struct{ key, group, topic *string }

func addClaimKeyFlags(fs *flag.FlagSet, purpose string) claimKeyFlags {
	return claimKeyFlags{
		key:   fs.String("claim-key", "", "the job's idempotency claim key, "+purpose),
		group: fs.String("group", "", "with -topic: the share group that runs the job (claim key idempotency.Key(group, topic, ID))"),
		topic: fs.String("topic", "", "with -group: the job's topic"),
	}
}

// resolve returns the claim key of job id: -claim-key, or the default
// key of -group and -topic; "" when neither is given.
func (f claimKeyFlags) resolve(id string) (string, error) {
	switch {
	case *f.key != "" && (*f.group != "" || *f.topic != ""):
		return "", errors.New("give -claim-key or -group and -topic, not both")
	case (*f.group == "") != (*f.topic == ""):
		return "", errors.New("-group and -topic go together")
	case *f.group != "":
		return idempotency.Key(*f.group, *f.topic, id), nil
	}
	return *f.key, nil
}

// args are the flags that name the key again, for a command to suggest:
// as given, or placeholders when none were.
func (f claimKeyFlags) args() string {
	switch {
	case *f.key != "":
		return fmt.Sprintf("-claim-key %q", *f.key)
	case *f.group != "":
		return fmt.Sprintf("-group %s -topic %s", *f.group, *f.topic)
	}
	return "-group GROUP -topic TOPIC"
}

// What the claim table holds for a job's claim key.
const (
	claimUnknown   = "unknown"   // no claim key given: not read
	claimNone      = "none"      // no row: no run committed, no cancel
	claimRan       = "ran"       // a run committed its claim
	claimCancelled = "cancelled" // a cancel (jobs cancel, pgoutbox.Cancel) holds the key
)

// claim is a job's claim row, as jobs show reads it.
type claim struct {
	Key   string
	State string
	At    time.Time     // when the run claimed it, or when it was cancelled
	Ago   time.Duration // now - At on Postgres's clock
}

var claimTable = pgx.Identifier{pgstore.TableDefault}.Sanitize()

// readClaim reads the claim row of key from idempotency/pgstore's claim
// table (the one jobs cancel writes to); State claimUnknown when key is "".
func readClaim(ctx context.Context, pool *pgxpool.Pool, key string) (claim, error) {
	c := claim{Key: key, State: claimUnknown}
	if key == "" {
		return c, nil
	}
	var cancelled *time.Time
	var ago float64
	err := pool.QueryRow(ctx, `SELECT claimed_at, cancelled_at, extract(epoch FROM now() - coalesce(cancelled_at, claimed_at))::float8
		FROM `+claimTable+` WHERE key = $1`, key).Scan(&c.At, &cancelled, &ago)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		c.State = claimNone
		return c, nil
	case err != nil:
		return c, tableHint(fmt.Errorf("read the claim %q: %w", key, err))
	case cancelled != nil:
		c.State, c.At = claimCancelled, *cancelled
	default:
		c.State = claimRan
	}
	c.Ago = seconds(ago)
	return c, nil
}
