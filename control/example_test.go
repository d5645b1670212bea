package control_test

import (
	"context"
	"fmt"
	"log"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
)

// Pause a topic for a group while its downstream migrates, then resume
// it. Every worker of the group stops fetching and starting the topic's
// jobs within a fetch round trip; jobs running finish.
func Example() {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	ctl, err := control.New(cl)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := ctl.EnsureTopic(ctx); err != nil {
		log.Fatal(err)
	}
	err = ctl.Pause(ctx, control.Pause{Group: "mailers", Topic: "newsletter", Reason: "ESP migration", By: "ana"})
	if err != nil {
		log.Fatal(err)
	}
	state, err := ctl.Read(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range state.Pauses {
		fmt.Println(p)
	}
	if err := ctl.Resume(ctx, "mailers", "newsletter"); err != nil {
		log.Fatal(err)
	}
}
