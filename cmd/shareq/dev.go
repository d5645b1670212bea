package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/shareq/shareq/internal/devbroker"
)

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shareq dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 9092, "port to listen on at 127.0.0.1")
	topics := fs.String("topics", "", "comma-separated topics to create at start")
	partitions := fs.Int("partitions", 6, "partitions of each topic created with -topics")
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
	var names []string
	for _, t := range strings.Split(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			names = append(names, t)
		}
	}
	c, err := devbroker.Start(*port, int32(*partitions), names...)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(stdout, "shareq dev broker listening on %s (topics: %v); Ctrl-C to stop\n", strings.Join(c.ListenAddrs(), ","), names)
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping")
	return nil
}
