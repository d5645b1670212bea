package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/internal/acl"
	"github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/worker"
)

const topicsUsage = `usage: shareq topics create NAME... [flags]

Creates the topics NAME..., each with -partitions partitions, and with -dlq
also each one's dead-letter topic NAME` + dlq.TopicSuffix + ` (the name the dlq middleware
parks jobs of NAME in by default), with -dlq-partitions partitions. With
-group-dlq GROUP it also creates the share group's dead-letter topic on the
broker, dlq.GROUP, with errors.deadletterqueue.group.enable=true (Kafka
4.4+: the broker writes every record the group archives there, and the
workers of GROUP take it up at start). With -workers it also creates the
workers' status topic (` + fleet.TopicDefault + `, or -workers-topic): one partition,
cleanup.policy=compact,delete, where each worker publishes its status for
"shareq workers" and the console. With -controls it also creates the
control topic (` + control.DefaultTopic + `, or -controls-topic): one partition,
compacted, where "shareq pause" writes pauses and every worker reads them
(workers and "shareq pause" create it themselves when they may). A topic
that exists already is left as it is and listed as "exists", so the command
can run at every deploy. It returns once every topic is in the brokers'
metadata, so a worker started next finds it.

shareq workers create no topic but the control topic: run this (or kafka-topics.sh, or your
infrastructure's tooling) before starting them.

Flags may come before or after the names.
`

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// topicsMetadataWait bounds how long "topics create" waits for new topics
// to show in the metadata.
const topicsMetadataWait = 30 * time.Second

// runTopics runs "shareq topics ...": args are what follows "topics".
func runTopics(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("topics create", topicsUsage, stderr)
	cluster := addClusterFlags(fs)
	partitions := fs.Int("partitions", 6, "partitions of each topic NAME")
	replication := fs.Int("replication-factor", -1, "replicas of each partition; -1: the brokers' default.replication.factor")
	withDLQ := fs.Bool("dlq", false, "also create each topic's dead-letter topic, NAME"+dlq.TopicSuffix)
	dlqPartitions := fs.Int("dlq-partitions", 1, "partitions of each dead-letter topic (with -dlq and -group-dlq)")
	groupDLQ := fs.String("group-dlq", "", "also create this share group's dead-letter topic on the broker, dlq.GROUP (Kafka 4.4+)")
	withWorkers := fs.Bool("workers", false, "also create the workers' status topic (see shareq workers)")
	workersTopic := fs.String("workers-topic", fleet.TopicDefault, "the workers' status topic's name (with -workers)")
	withControls := fs.Bool("controls", false, "also create the control topic (see shareq pause)")
	controlsTopic := fs.String("controls-topic", control.DefaultTopic, "the control topic's name (with -controls)")
	// "create" is the only subcommand: "shareq topics -h" is its help,
	// with its flags.
	switch {
	case len(args) == 0:
		fs.Usage()
		return errUsage
	case isHelp(args[0]):
		fs.Usage()
		return flag.ErrHelp
	case args[0] != "create":
		fmt.Fprintf(stderr, "shareq topics: unknown subcommand %q\n\n", args[0])
		fs.Usage()
		return errUsage
	}
	names, err := parseInterspersed(fs, args[1:], -1)
	if err != nil {
		return err
	}
	if len(names) == 0 && *groupDLQ == "" && !*withWorkers && !*withControls {
		fmt.Fprintf(stderr, "shareq topics create: name at least one topic\n\n")
		fs.Usage()
		return errUsage
	}
	switch {
	case *partitions < 1:
		return fmt.Errorf("-partitions %d: must be at least 1", *partitions)
	case *dlqPartitions < 1:
		return fmt.Errorf("-dlq-partitions %d: must be at least 1", *dlqPartitions)
	case *replication == 0 || *replication < -1:
		return fmt.Errorf("-replication-factor %d: must be at least 1, or -1 for the brokers' default", *replication)
	}
	var specs []topicSpec
	seen := map[string]bool{}
	add := func(name string, n int, configs map[string]*string) error {
		if err := checkTopicName(name); err != nil {
			return err
		}
		if !seen[name] {
			seen[name] = true
			specs = append(specs, topicSpec{name: name, partitions: int32(n), configs: configs})
		}
		return nil
	}
	for _, name := range names {
		if err := add(name, *partitions, nil); err != nil {
			return err
		}
		if *withDLQ {
			if err := add(name+dlq.TopicSuffix, *dlqPartitions, nil); err != nil {
				return err
			}
		}
	}
	if *groupDLQ != "" {
		enable := "true"
		if err := add(worker.BrokerDLQTopic(*groupDLQ), *dlqPartitions, map[string]*string{groupcfg.TopicDLQGroupEnable: &enable}); err != nil {
			return fmt.Errorf("-group-dlq %q: %w", *groupDLQ, err)
		}
	}

	if *withWorkers {
		if err := add(*workersTopic, 1, fleet.TopicConfigs()); err != nil {
			return fmt.Errorf("-workers-topic %q: %w", *workersTopic, err)
		}
	}
	if *withControls {
		if err := add(*controlsTopic, 1, control.TopicConfigs()); err != nil {
			return fmt.Errorf("-controls-topic %q: %w", *controlsTopic, err)
		}
	}
	cl, err := connect(ctx, cluster)
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := createTopics(ctx, kadm.NewClient(cl), int16(*replication), specs)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.state, r.name, plural(int(r.partitions), "partition"))
	}
	return tw.Flush()
}

type topicSpec struct {
	name       string
	partitions int32
	configs    map[string]*string
}

// topicResult is what createTopics did with one topic: state "created"
// or "exists", and the topic's partition count.
type topicResult struct {
	name       string
	state      string
	partitions int32
}

// createTopics creates each topic of specs that does not exist yet, and
// waits until every one of them is in the brokers' metadata with a leader
// for each partition. An existing topic is left alone and reported with
// its own partition count.
func createTopics(ctx context.Context, adm *kadm.Client, replication int16, specs []topicSpec) ([]topicResult, error) {
	out := make([]topicResult, len(specs))
	for i, s := range specs {
		resp, err := adm.CreateTopic(ctx, s.partitions, replication, s.configs, s.name)
		if err == nil {
			err = resp.Err
		}
		out[i] = topicResult{name: s.name, state: "created", partitions: s.partitions}
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			out[i].state = "exists"
		case err != nil && s.configs[groupcfg.TopicDLQGroupEnable] != nil && strings.Contains(resp.ErrMessage, "Unknown topic config"):
			return nil, fmt.Errorf("create topic %s: the brokers do not know the topic config %s: share-group dead-letter topics (-group-dlq) need Apache Kafka 4.4+", s.name, groupcfg.TopicDLQGroupEnable)
		case err != nil:
			msg := resp.ErrMessage
			if msg != "" {
				msg = " (" + msg + ")"
			}
			return nil, fmt.Errorf("create topic %s: %w%s (does this client have CREATE on the cluster or the topic?)", s.name, err, msg)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, topicsMetadataWait)
	defer cancel()
	for i := range out {
		n, err := waitTopic(wctx, adm, out[i].name)
		if err != nil {
			return nil, err
		}
		out[i].partitions = n
	}
	return out, nil
}

// waitTopic waits until name is in the metadata with a leader for every
// partition and returns its partition count.
func waitTopic(ctx context.Context, adm *kadm.Client, name string) (int32, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		md, err := adm.ListTopics(ctx, name)
		if d, ok := md[name]; err == nil && ok && acl.Denied(d.Err) {
			err = d.Err
		}
		if acl.Denied(err) {
			// Created, but this principal may not see it: waiting is no use.
			return 0, fmt.Errorf("topic %s: %s", name, acl.Missing(acl.Right{Op: "Describe", Resource: acl.Topic, Name: name}, "", err))
		}
		if err == nil {
			if d, ok := md[name]; ok && d.Err == nil && len(d.Partitions) > 0 && leadersKnown(d) {
				return int32(len(d.Partitions)), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("topic %s is not in the brokers' metadata after %v: %w", name, topicsMetadataWait, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

func leadersKnown(d kadm.TopicDetail) bool {
	for _, p := range d.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// checkTopicName applies Kafka's rules for topic names: 1 to 249 of
// [a-zA-Z0-9._-], and not "." or "..".
func checkTopicName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("topic name %q is not allowed", name)
	case len(name) > 249:
		return fmt.Errorf("topic name %q is longer than Kafka's 249 characters", name)
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}); i >= 0 {
		r, _ := utf8.DecodeRuneInString(name[i:])
		return fmt.Errorf("topic name %q has %q: Kafka allows only letters, digits, '.', '_' and '-'", name, r)
	}
	return nil
}
