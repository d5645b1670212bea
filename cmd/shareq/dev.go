package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/internal/devbroker"
	"github.com/shareq/shareq/internal/fleet"
)

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shareq dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 9092, "port to listen on at 127.0.0.1")
	topics := fs.String("topics", "", "comma-separated topics to create at start")
	partitions := fs.Int("partitions", 6, "partitions of each topic created with -topics")
	consoleAddr := fs.String("console", "127.0.0.1:8080", "serve the web console, actions enabled, at this address (\"\" for none)")
	withDLQ := fs.Bool("dlq", true, "with -topics, also create each topic's dead-letter topic, NAME"+dlq.TopicSuffix+" (1 partition); -dlq=false to skip")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: shareq dev [flags]\n\nRuns an in-process Kafka broker (kfake) with share groups on 127.0.0.1,\nin memory, until interrupted. For development only: use Apache Kafka 4.2+\nin production.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if *partitions < 1 {
		return fmt.Errorf("-partitions %d: must be at least 1", *partitions)
	}
	var names []string
	for _, t := range strings.Split(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			if err := checkTopicName(t); err != nil {
				return fmt.Errorf("-topics: %w", err)
			}
			names = append(names, t)
		}
	}
	// The dlq middleware parks jobs of NAME in NAME.dlq by default; with
	// it created, a worker that requires it (worker.RequireTopics) starts
	// at once.
	var dlqs []string
	if *withDLQ {
		for _, n := range names {
			dlqs = append(dlqs, n+dlq.TopicSuffix)
		}
	}
	// The workers' status topic, so shareq workers and the console list
	// the workers of the dev broker.
	c, err := devbroker.StartTopics(*port,
		devbroker.Topics{Partitions: int32(*partitions), Names: names},
		devbroker.Topics{Partitions: 1, Names: append(dlqs, fleet.TopicDefault)})
	if err != nil {
		return err
	}
	defer c.Close()
	names = append(append(names, dlqs...), fleet.TopicDefault)
	fmt.Fprintf(stdout, "shareq dev broker listening on %s (topics: %v); Ctrl-C to stop\n", strings.Join(c.ListenAddrs(), ","), names)
	if *consoleAddr == "" {
		<-ctx.Done()
		fmt.Fprintln(stdout, "stopping")
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ClientID("shareq-console"))
	if err != nil {
		return err
	}
	defer cl.Close()
	err = serveConsole(ctx, cl, consoleConfig{listen: *consoleAddr, actions: true}, stdout, stderr)
	fmt.Fprintln(stdout, "stopping")
	if err != nil {
		return fmt.Errorf("%w (-console \"\" runs the broker without it)", err)
	}
	return nil
}
