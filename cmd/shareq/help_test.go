package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"regexp"
	"strings"
	"testing"
)

// help runs "shareq args... -h" and returns what it printed.
func help(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append(args, "-h"), &out, &errOut)
	if !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errUsage) {
		t.Errorf("shareq %s -h: %v, want the help (exit status 2)", strings.Join(args, " "), err)
	}
	if out.Len() > 0 {
		t.Errorf("shareq %s -h wrote to stdout:\n%s", strings.Join(args, " "), out.String())
	}
	return errOut.String()
}

var (
	// commandsSection is a command group's list of its commands, up to
	// the first empty line.
	commandsSection = regexp.MustCompile(`(?ms)^commands:\n(.*?)\n\n`)
	subcommandLine  = regexp.MustCompile(`(?m)^  ([a-z]+) `)
	// flagLine is a flag as flag.PrintDefaults prints it.
	flagLine = regexp.MustCompile(`(?m)^  -[a-z][\w-]*( \S+)?$`)
)

// Every command's -h, and every subcommand's of a command group, lists
// its flags (issue 29: "shareq topics -h" listed none). The commands come
// from the command table, the subcommands from each group's own help, so
// a command added later is checked too.
func TestEveryCommandHelpListsItsFlags(t *testing.T) {
	t.Parallel()
	// Flags every command of a kind must list.
	cluster, database := []string{"-brokers", "-tls", "-sasl-user"}, []string{"-database"}
	want := map[string][]string{
		"dev":            {"-port", "-topics", "-partitions", "-console"},
		"topics":         append([]string{"-partitions", "-replication-factor", "-dlq", "-dlq-partitions", "-group-dlq", "-workers", "-workers-topic"}, cluster...),
		"dlq list":       cluster,
		"dlq show":       cluster,
		"dlq replay":     cluster,
		"status":         append([]string{"-json"}, cluster...),
		"workers":        append([]string{"-json", "-group", "-topic"}, cluster...),
		"reset":          append([]string{"-to", "-topic", "-yes"}, cluster...),
		"enqueue":        append([]string{"-id", "-key"}, cluster...),
		"relay":          append(database, cluster...),
		"jobs list":      database,
		"jobs show":      append([]string{"-group", "-topic", "-claim-key"}, database...),
		"jobs schedules": database,
		"jobs cancel":    append([]string{"-group", "-topic", "-claim-key"}, database...),
		"console":        append([]string{"-listen", "-actions", "-workers-topic"}, cluster...),
	}
	checked := map[string]bool{}
	for _, name := range commandOrder {
		text := help(t, name)
		leaves := [][]string{{name}}
		if m := commandsSection.FindStringSubmatch(text); m != nil {
			leaves = nil
			for _, sub := range subcommandLine.FindAllStringSubmatch(m[1], -1) {
				leaves = append(leaves, []string{name, sub[1]})
			}
			if len(leaves) == 0 {
				t.Errorf("shareq %s -h lists no commands:\n%s", name, text)
			}
		}
		for _, leaf := range leaves {
			cmd := strings.Join(leaf, " ")
			checked[cmd] = true
			text := text
			if len(leaf) > 1 {
				text = help(t, leaf...)
			}
			_, flags, ok := strings.Cut(text, "\nflags:\n")
			if !ok || !flagLine.MatchString(flags) {
				t.Errorf("shareq %s -h lists no flags:\n%s", cmd, text)
				continue
			}
			for _, f := range want[cmd] {
				if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(f) + `( \S+)?$`).MatchString(flags) {
					t.Errorf("shareq %s -h does not list %s:\n%s", cmd, f, text)
				}
			}
		}
	}
	for cmd := range want {
		if !checked[cmd] {
			t.Errorf("shareq %s: not reached from the command table and the groups' help", cmd)
		}
	}
}
