package acl

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestGrant(t *testing.T) {
	for _, tc := range []struct {
		r         Right
		bootstrap string
		want      string
	}{
		{Right{"Read", Topic, "jobs"}, "k:9092",
			"kafka-acls.sh --bootstrap-server k:9092 --add --allow-principal 'User:<principal>' --operation Read --topic jobs"},
		{Right{"DescribeConfigs", Group, "my group"}, "",
			"kafka-acls.sh --bootstrap-server <broker:port> --add --allow-principal 'User:<principal>' --operation DescribeConfigs --group 'my group'"},
		{Right{"Write", Topic, "it's"}, "k:9092",
			`kafka-acls.sh --bootstrap-server k:9092 --add --allow-principal 'User:<principal>' --operation Write --topic 'it'\''s'`},
		{Right{"Describe", Cluster, ""}, "k:9092",
			"kafka-acls.sh --bootstrap-server k:9092 --add --allow-principal 'User:<principal>' --operation Describe --cluster"},
	} {
		if got := tc.r.Grant(tc.bootstrap); got != tc.want {
			t.Errorf("%v.Grant(%q) =\n %s\nwant\n %s", tc.r, tc.bootstrap, got, tc.want)
		}
	}
}

func TestDenied(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("TOPIC_AUTHORIZATION_FAILED"), false}, // text alone is not the broker's code
		{kerr.TopicAuthorizationFailed, true},
		{fmt.Errorf("describe: %w", kerr.GroupAuthorizationFailed), true},
		{kerr.ClusterAuthorizationFailed, true},
		{kerr.UnknownTopicOrPartition, false},
	} {
		if got := Denied(tc.err); got != tc.want {
			t.Errorf("Denied(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestMissing(t *testing.T) {
	got := Missing(Right{"Read", Group, "g"}, "k:1", kerr.GroupAuthorizationFailed)
	want := `the client's principal lacks Read on group "g" (` + kerr.GroupAuthorizationFailed.Error() +
		`); grant it with: kafka-acls.sh --bootstrap-server k:1 --add --allow-principal 'User:<principal>' --operation Read --group g`
	if got != want {
		t.Errorf("Missing =\n %s\nwant\n %s", got, want)
	}
}

func TestAllows(t *testing.T) {
	read, describe := int32(1)<<int(kmsg.ACLOperationRead), int32(1)<<int(kmsg.ACLOperationDescribe)
	for _, tc := range []struct {
		ops  int32
		op   kmsg.ACLOperation
		want bool
	}{
		{read | describe, kmsg.ACLOperationRead, true},
		{describe, kmsg.ACLOperationRead, false},
		{describe, kmsg.ACLOperationWrite, false},
		{0, kmsg.ACLOperationDescribe, false},
		{math.MinInt32, kmsg.ACLOperationWrite, true}, // the broker did not say
	} {
		if got := Allows(tc.ops, tc.op); got != tc.want {
			t.Errorf("Allows(%b, %v) = %v, want %v", tc.ops, tc.op, got, tc.want)
		}
	}
}
