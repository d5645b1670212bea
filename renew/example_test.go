package renew_test

import (
	"fmt"
	"time"

	"github.com/shareq/shareq/renew"
)

// A worker tracks each running job's lock; Due says which locks to renew
// (with a RENEW acknowledgement) and which jobs went past MaxHold.
func ExampleTracker() {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tr := renew.NewTracker[string](renew.Policy{MaxHold: 70 * time.Second})
	// The record arrived with 30 s left on its lock.
	tr.Add("resize-42", start, start.Add(30*time.Second), 0)

	next, _ := tr.Next()
	fmt.Println("first renewal due after", next.Sub(start))

	due, _ := tr.Due(next)
	fmt.Println("renew:", due)
	tr.Renewed("resize-42", next) // the broker confirmed it
	fmt.Println("lock now runs to", tr.Deadline("resize-42").Sub(start))

	_, over := tr.Due(start.Add(70 * time.Second))
	fmt.Println("over MaxHold:", over)
	// Output:
	// first renewal due after 15s
	// renew: [resize-42]
	// lock now runs to 45s
	// over MaxHold: [resize-42]
}
