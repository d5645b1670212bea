package main

import (
	"errors"
	"flag"
	"fmt"

	"github.com/shareq/shareq/idempotency"
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
