package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
)

// stdin is where "shareq enqueue" reads a payload given as "-".
var stdin io.Reader = os.Stdin

const enqueueUsage = `usage: shareq enqueue TOPIC [JSON] [flags]

Enqueue one job on TOPIC and print its job ID. The payload is the JSON
argument, or standard input when it is missing or "-"; it must be valid
JSON (the form handler.JSON decodes). Flags may come before or after the
arguments; put "--" before a payload that starts with "-" (a negative
number). A job without -key goes to the next partition, round-robin.
`

func runEnqueue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("enqueue", enqueueUsage, stderr)
	cluster := addClusterFlags(fs)
	id := fs.String("id", "", "job ID (default: a fresh UUIDv7)")
	key := fs.String("key", "", "record key (default: none)")
	pos, err := parseInterspersed(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		fmt.Fprintf(stderr, "%s: want TOPIC and an optional JSON payload, got %d argument(s) %q\n\n", fs.Name(), len(pos), pos)
		fs.Usage()
		return errUsage
	}
	topic := pos[0]
	var payload []byte
	if len(pos) == 2 && pos[1] != "-" {
		payload = []byte(pos[1])
	} else {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("enqueue: read the payload from stdin: %w", err)
		}
		payload = b
	}
	if !json.Valid(payload) {
		return errors.New("enqueue: the payload is not valid JSON")
	}
	var opts []enqueue.Option
	if *id != "" {
		opts = append(opts, enqueue.ID(*id))
	}
	if *key != "" {
		opts = append(opts, enqueue.Key([]byte(*key)))
	}
	// enqueue.ProducerOpts: successive runs spread their jobs over the
	// partitions (the round-robin starts at a random partition).
	cl, err := cluster.client(append(enqueue.ProducerOpts(), kgo.UnknownTopicRetries(2))...)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	defer cl.Close()
	q, err := enqueue.New(cl)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	jobID, err := q.Enqueue(ctx, topic, json.RawMessage(payload), opts...)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, jobID)
	return nil
}
