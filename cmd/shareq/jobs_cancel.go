package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/shareq/shareq/enqueue/pgoutbox"
)

const jobsCancelUsage = `usage: shareq jobs cancel ID [-claim-key KEY | -group GROUP -topic TOPIC] [flags]

Cancels the job ID through pgoutbox.Cancel, in a transaction of its own,
and says what happened:

  withdrawn  it waited in the outbox (due or not): its row is gone, with
             its unique key; it never reaches Kafka
  stopped    the relay had produced it: its claim key is marked cancelled
             in shareq_processed_jobs, and a worker that claims its jobs
             with idempotency.Middleware on idempotency/pgstore accepts it
             without running it (outcome cancelled)
  produced   the relay had produced it and no claim key was given: nothing
             was recorded, the worker runs it
  too-late   a worker had already run it
  unknown    not in the outbox, and not produced within the relay's
             ProducedRetention

The claim key is the one the worker's idempotency.Middleware claims: with
its defaults, -group and -topic (the share group that runs the job, the
job's topic) make it; a middleware with its own KeyFunc or KeyPrefix needs
-claim-key. Exit status 0 for withdrawn and stopped, 1 otherwise.
`

func jobsCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newJobsFlags("cancel", jobsCancelUsage, stderr)
	keyFlags := addClaimKeyFlags(f.fs, "to stop it once produced")
	asJSON := f.fs.Bool("json", false, "print the result as JSON")
	pos, err := f.parse(args, 1)
	if err != nil {
		return err
	}
	id := pos[0]
	claimKey, err := keyFlags.resolve(id)
	if err != nil {
		return err
	}
	var opts []pgoutbox.CancelOption
	if claimKey != "" {
		opts = append(opts, pgoutbox.ClaimKey(claimKey))
	}
	pool, err := f.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := pgoutbox.Cancel(ctx, pool, id, opts...)
	if err != nil {
		return tableHint(err)
	}
	if *asJSON {
		out := struct {
			JobID    string `json:"job_id"`
			Result   string `json:"result"`
			ClaimKey string `json:"claim_key,omitempty"`
		}{id, res.String(), claimKey}
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			return err
		}
	}
	var msg string
	ok := false
	switch res {
	case pgoutbox.CancelWithdrawn:
		msg, ok = fmt.Sprintf("job %s withdrawn from the outbox: it will not reach Kafka", id), true
	case pgoutbox.CancelStopped:
		msg, ok = fmt.Sprintf("job %s was already produced; its claim key %q is marked cancelled: a worker with idempotency.Middleware on pgstore accepts it without running it", id, claimKey), true
	case pgoutbox.CancelProduced:
		msg = fmt.Sprintf("job %s was already produced and nothing was recorded: the worker runs it (give -group and -topic, or -claim-key, to stop it)", id)
	case pgoutbox.CancelTooLate:
		msg = fmt.Sprintf("job %s was already produced and run (claim key %q holds its run): nothing was cancelled", id, claimKey)
	default:
		msg = fmt.Sprintf("job %s is unknown: %s; nothing was recorded", id, unknownJobText)
	}
	if ok {
		if !*asJSON {
			fmt.Fprintln(stdout, msg)
		}
		return nil
	}
	return fmt.Errorf("%s: %s", res, msg)
}
