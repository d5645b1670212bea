// Package acl names the Kafka ACLs shareq's clients need, so that an
// authorization failure can say which right is missing and print the
// kafka-acls.sh command that grants it. docs/security.md lists the rights
// per feature.
package acl

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Principal stands for the client's principal in the commands printed:
// the client cannot know it (SCRAM user, certificate name or a mapping
// rule of the broker decide it).
const Principal = "User:<principal>"

// Resource kinds, as kafka-acls.sh names them.
const (
	Topic   = "topic"
	Group   = "group"
	Cluster = "cluster"
)

// A Right is one operation on one resource.
type Right struct {
	// Op is the operation as kafka-acls.sh spells it: Read, Write,
	// Describe, DescribeConfigs, AlterConfigs.
	Op string
	// Resource is Topic, Group or Cluster.
	Resource string
	// Name is the topic or group; empty for the cluster.
	Name string
}

func (r Right) String() string {
	if r.Resource == Cluster {
		return r.Op + " on the cluster"
	}
	return fmt.Sprintf("%s on %s %q", r.Op, r.Resource, r.Name)
}

// Grant returns the kafka-acls.sh command that grants r, given one of the
// cluster's bootstrap servers (a placeholder when empty).
func (r Right) Grant(bootstrap string) string {
	if bootstrap == "" {
		bootstrap = "<broker:port>"
	}
	res := "--cluster"
	if r.Resource != Cluster {
		res = "--" + r.Resource + " " + shellQuote(r.Name)
	}
	return fmt.Sprintf("kafka-acls.sh --bootstrap-server %s --add --allow-principal '%s' --operation %s %s",
		bootstrap, Principal, r.Op, res)
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ErrDescribeOnly is the cause of a missing Read that no request was
// refused for: the broker's authorized operations for the resource (a
// metadata or describe answer) have Describe and not Read.
var ErrDescribeOnly = errors.New("the broker authorizes Describe only")

// Allows reports whether ops, the authorized operations bit field of a
// metadata or describe answer, include op; true when the broker did not
// say (math.MinInt32).
func Allows(ops int32, op kmsg.ACLOperation) bool {
	return ops == math.MinInt32 || ops&(1<<int(op)) != 0
}

// Denied reports whether err is a broker's refusal for want of an ACL.
func Denied(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// Missing returns the text of an error for a missing right: what is
// missing, the broker's answer, and the command that grants it.
func Missing(r Right, bootstrap string, cause error) string {
	s := "the client's principal lacks " + r.String()
	if cause != nil {
		s += " (" + cause.Error() + ")"
	}
	return s + "; grant it with: " + r.Grant(bootstrap)
}
