package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The burst, scale and rate scenarios re-execute their executable, here
	// the test binary, as worker processes.
	if len(os.Args) > 1 && os.Args[1] == burstWorkerCmd {
		if err := runBurstWorker(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == rateWorkerCmd {
		if err := runRateWorker(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == scaleWorkerCmd {
		if err := runScaleWorker(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// testBroker is the backend of the tests that can run on a real broker
// too: $SHAREQ_TEST_BROKERS (host:port,...), kfake when it is unset or
// "kfake".
func testBroker() string {
	if b := os.Getenv("SHAREQ_TEST_BROKERS"); b != "" {
		return b
	}
	return "kfake"
}
