package storetest_test

import (
	"testing"

	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/storetest"
)

// testMemoryStoreConformance is what a store's package writes as a test
// (TestMemoryStoreConformance there): the suite runs its subtests in
// parallel, each on a new store from the function given.
func testMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) idempotency.Store { return idempotency.NewMemoryStore() })
}

// Run is called from a test of the store's package, with a function
// that returns a new, empty store; go test then runs the suite.
func ExampleRun() {
	_ = testMemoryStoreConformance
}
