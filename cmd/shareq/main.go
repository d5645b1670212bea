// Command shareq is the shareq operator tool.
//
//	shareq dev [-port 9092] [-topics a,b] [-partitions 6]
//	    run an in-process Kafka broker with share groups for local
//	    development, until interrupted
//	shareq dlq list|show|replay ...
//	    inspect parked jobs and move them back to their topic
//	shareq status GROUP [-json]
//	    show a share group's state, members, start offsets and lag
//	shareq workers [-group GROUP] [-json]
//	    list the workers running now: host, version, topics, jobs,
//	    breakers and dependencies down
//	shareq pause GROUP [-topic TOPIC] -reason TEXT
//	shareq resume GROUP [-topic TOPIC]
//	shareq pauses [-group GROUP]
//	    pause a topic (or a whole group) on every worker of the group,
//	    resume it, list the pauses in force
//	shareq limit GROUP -topic TOPIC [-rate N/s] [-key-concurrency N] -reason TEXT
//	shareq limits [-group GROUP]
//	    change a topic's rate or key limits without a restart, list them
//	shareq reset GROUP -to earliest|latest|OFFSET [-topic T] [-yes]
//	    move an empty share group's start offsets
//	shareq enqueue TOPIC [JSON] [-id ID] [-key KEY]
//	    enqueue one job (payload from the argument or stdin), print its ID
//	shareq relay -database URL
//	    move jobs from the Postgres outbox (enqueue/pgoutbox) to Kafka
//	shareq jobs list|show|schedules|cancel -database URL ...
//	    list jobs for later in the outbox and periodic schedules, cancel
//	    a job by ID
//	shareq console [-database URL] [-listen 127.0.0.1:8080] [-actions]
//	    serve the operator's web console (docs/console.md)
//
// Commands that talk to a cluster take -brokers (default $SHAREQ_BROKERS,
// else 127.0.0.1:9092) and, for a secured cluster, TLS and SASL flags,
// each with an environment variable for its default:
//
//	-tls ($SHAREQ_TLS=true)  -tls-ca FILE ($SHAREQ_TLS_CA)
//	-tls-cert FILE -tls-key FILE ($SHAREQ_TLS_CERT, $SHAREQ_TLS_KEY; mTLS)
//	-tls-server-name NAME ($SHAREQ_TLS_SERVER_NAME)
//	-sasl-mechanism PLAIN|SCRAM-SHA-256|SCRAM-SHA-512 ($SHAREQ_SASL_MECHANISM)
//	-sasl-user USER ($SHAREQ_SASL_USER)
//
// The SASL password comes from $SHAREQ_SASL_PASSWORD or the file named by
// $SHAREQ_SASL_PASSWORD_FILE, never from a flag. docs/security.md lists
// the ACLs each command needs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/shareq/shareq/internal/acl"
)

// errUsage makes main exit with status 2 after the usage was printed.
var errUsage = errors.New("usage")

type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"dev":     {"run an in-process Kafka broker for local development", runDev},
	"dlq":     {"list, show and replay parked (dead-lettered) jobs", runDLQ},
	"status":  {"show a share group's members, start offsets and lag", runStatus},
	"reset":   {"move an empty share group's start offsets", runReset},
	"enqueue": {"enqueue one job (a JSON payload) and print its job ID", runEnqueue},
	"relay":   {"move jobs from the Postgres outbox to Kafka", runRelay},
	"jobs":    {"list jobs for later and periodic schedules, cancel a job", runJobs},
	"topics":  {"create job topics and their dead-letter topics", runTopics},
	"workers": {"list the workers running now, with what each runs", runWorkers},
	"pause":   {"pause a topic or a whole group on every worker of the group", runPause},
	"resume":  {"resume a paused topic or group", runResume},
	"pauses":  {"list the pauses in force, with who paused and why", runPauses},
	"limit":   {"change a topic's rate or key limits without a restart", runLimit},
	"limits":  {"list the limits set at run time", runLimits},
	"console": {"serve the operator's web console", runConsole},
}

// commandOrder lists commands in the order usage shows them.
var commandOrder = []string{"dev", "topics", "dlq", "status", "workers", "pause", "resume", "pauses", "limit", "limits", "reset", "enqueue", "relay", "jobs", "console"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, errUsage), errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "shareq:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		return errUsage
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "shareq: unknown command %q\n\n", args[0])
		usage(stderr)
		return errUsage
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	if acl.Denied(err) {
		return fmt.Errorf("%w (the principal lacks an ACL the command needs; docs/security.md lists them per command, and kafka-acls.sh --add grants them)", err)
	}
	return err
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: shareq <command> [flags]\n\ncommands:")
	for _, name := range commandOrder {
		if c, ok := commands[name]; ok {
			fmt.Fprintf(w, "  %-8s %s\n", name, c.summary)
		}
	}
	fmt.Fprint(w, "\n", clusterFlagsUsage)
	fmt.Fprintln(w, "\nRun 'shareq <command> -h' for a command's flags.")
}
