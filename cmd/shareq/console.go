package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/internal/fleet"
)

// The environment variables of the console's basic-auth password: never
// a flag, so it does not show in ps or a shell history.
const (
	consolePasswordEnv  = "SHAREQ_CONSOLE_PASSWORD"
	consolePasswordFile = "SHAREQ_CONSOLE_PASSWORD_FILE"
)

const consoleUsage = `usage: shareq console [flags]

Serves the operator's web console (docs/console.md): share groups, their
members, offsets and lag, topics and their DLQ topics, parked jobs, a
job's whole life by its ID (the search box), and with -database the
outbox (jobs for later, schedules) and the job's outbox rows, runs and
claim. Read-only unless started with -actions, which enables replaying
parked jobs, enqueueing a job, cancelling a job for later and resetting
a group's start offsets from the pages.

With -auth-user, every request needs HTTP basic auth as that user, with
the password from $SHAREQ_CONSOLE_PASSWORD or the first line of the file
$SHAREQ_CONSOLE_PASSWORD_FILE (there is no flag for it). Without it the
console has no auth: keep -listen on 127.0.0.1, or put a proxy that
authenticates in front of it. Basic auth sends the password in every
request: serve the console over TLS (a proxy) beyond localhost.

-actions on an address other than the loopback refuses to start without
-auth-user, unless given -actions-without-auth-on-network (then anyone
who reaches the address can replay, enqueue, reset and pause). Without -auth-user
the actions are served to loopback clients only, never through a proxy.
Every action is logged on stderr: who, what, and the outcome.
`

func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("console", consoleUsage, stderr)
	cluster := addClusterFlags(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve the console at")
	database := fs.String("database", os.Getenv(databaseEnv), "Postgres URL, for the outbox page; $"+databaseEnv+" sets the default")
	actions := fs.Bool("actions", false, "enable the actions: replay, enqueue, reset, pause and resume")
	prefix := fs.String("prefix", "", "serve under this path, such as /console (for a proxy that forwards it)")
	workersTopic := fs.String("workers-topic", fleet.TopicDefault, "the workers' status topic the Workers page reads")
	controlsTopic := fs.String("controls-topic", control.DefaultTopic, "the control topic the group pages read pauses from and write them to")
	user := fs.String("auth-user", "", "require HTTP basic auth as this user (password from $"+consolePasswordEnv+" or the file $"+consolePasswordFile+")")
	scanLimit := fs.Int("scan-limit", console.ScanLimitDefault, "records of each DLQ partition a DLQ page, and of each DLQ topic the job page, reads at most (console.ScanLimit)")
	anyClient := fs.Bool("actions-without-auth-on-network", false, "with -actions and no -auth-user, serve the actions to anyone who reaches -listen, not only on the loopback")
	if _, err := parseInterspersed(fs, args, 0); err != nil {
		return err
	}
	if *scanLimit < 1 {
		return fmt.Errorf("-scan-limit %d: want at least 1", *scanLimit)
	}
	c := consoleConfig{listen: *listen, database: *database, actions: *actions, prefix: *prefix, anyClient: *anyClient, workersTopic: *workersTopic, controlsTopic: *controlsTopic, scanLimit: *scanLimit}
	if *user != "" {
		pass, err := consolePassword()
		if err != nil {
			return err
		}
		c.auth = console.BasicAuth(*user, pass)
	}
	if err := c.check(); err != nil {
		return err
	}
	cl, err := connect(ctx, cluster)
	if err != nil {
		return err
	}
	defer cl.Close()
	return serveConsole(ctx, cl, c, stdout, stderr)
}

type consoleConfig struct {
	listen, database, prefix string
	workersTopic             string // "": the default
	controlsTopic            string // "": the default
	scanLimit                int    // 0: the default
	actions                  bool
	auth                     console.Option // BasicAuth, or nil
	anyClient                bool           // -actions-without-auth-on-network
}

// check refuses -actions without auth on an address other than the
// loopback unless the operator opted out, and the opt-out where it
// means nothing.
func (c consoleConfig) check() error {
	switch {
	case c.anyClient && (!c.actions || c.auth != nil):
		return errors.New("-actions-without-auth-on-network is for -actions without -auth-user: remove it")
	case !c.actions || c.auth != nil || c.anyClient:
		return nil
	}
	loopback, err := loopbackAddr(c.listen)
	if err != nil {
		return fmt.Errorf("-listen %q: %w", c.listen, err)
	}
	if !loopback {
		return fmt.Errorf("-actions on -listen %s, an address other hosts can reach, needs authentication: give -auth-user NAME with its password in $%s or $%s, "+
			"or listen on 127.0.0.1; -actions-without-auth-on-network serves the actions to anyone who reaches the address", c.listen, consolePasswordEnv, consolePasswordFile)
	}
	return nil
}

// loopbackAddr reports whether the host of the listen address addr is on
// the loopback only: an IP that is, or a name all of whose addresses
// are; an empty host (every interface) is not.
func loopbackAddr(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "" {
		return false, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback(), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false, err
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false, nil
		}
	}
	return len(ips) > 0, nil
}

// serveConsole serves the console for cl at c.listen until ctx ends,
// after printing its address.
func serveConsole(ctx context.Context, cl *kgo.Client, c consoleConfig, stdout, stderr io.Writer) error {
	opts := []console.Option{console.Client(cl), console.Logger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))}
	if c.scanLimit != 0 {
		opts = append(opts, console.ScanLimit(c.scanLimit))
	}
	if c.actions {
		opts = append(opts, console.Actions())
	}
	if c.auth != nil {
		opts = append(opts, c.auth)
	}
	if c.anyClient {
		opts = append(opts, console.ActionsWithoutAuthOnNetwork())
	}
	if c.prefix != "" {
		opts = append(opts, console.Prefix(c.prefix))
	}
	if c.workersTopic != "" {
		opts = append(opts, console.WorkersTopic(c.workersTopic))
	}
	if c.controlsTopic != "" {
		opts = append(opts, console.ControlTopic(c.controlsTopic))
	}
	if c.database != "" {
		pool, err := pgxpool.New(ctx, c.database)
		if err != nil {
			return fmt.Errorf("-database: %w", err)
		}
		defer pool.Close()
		opts = append(opts, console.Outbox(pool))
	}
	// The charts' sampler runs as long as the server, and stops with it.
	sm, err := console.NewSampler(cl, 0)
	if err != nil {
		return err
	}
	opts = append(opts, console.Charts(sm))
	h, err := console.New(opts...)
	if err != nil {
		return err
	}
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan error, 1)
	go func() { sampled <- sm.Run(sctx) }()
	defer func() { stopSampling(); <-sampled }()
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	mode := "read-only; -actions enables replay, enqueue, reset and pause"
	switch {
	case c.actions && c.auth != nil:
		mode = "actions enabled, with basic auth"
	case c.anyClient:
		mode = "actions enabled without auth, for anyone who reaches it"
	case c.actions:
		mode = "actions enabled" // for loopback clients (console.Actions)
	}
	fmt.Fprintf(stdout, "shareq console on http://%s%s/ (%s)\n", ln.Addr(), strings.TrimRight(c.prefix, "/"), mode)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// consolePassword reads the basic-auth password from the environment or
// the file it names.
func consolePassword() (string, error) {
	pass := os.Getenv(consolePasswordEnv)
	if f := os.Getenv(consolePasswordFile); pass == "" && f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			// The error names the file, never its content.
			return "", fmt.Errorf("$%s: %w", consolePasswordFile, err)
		}
		pass, _, _ = strings.Cut(string(b), "\n")
	}
	if pass == "" {
		return "", errors.New("-auth-user needs a password: set $" + consolePasswordEnv + " or $" + consolePasswordFile + " (there is no flag for it)")
	}
	return pass, nil
}
