package member

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// directMember returns a member of group "g" on topic "t" whose client
// talks to a kfake cluster of the given number of brokers, for the tests
// that drive the run loop's functions (turn, sendFetch, takeOps) by hand
// and never call Run.
func directMember(t *testing.T, brokers int) *Member {
	t.Helper()
	fake, err := kfake.NewCluster(kfake.NumBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	m, err := New(Config{Client: cl, Group: "g", Topics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
