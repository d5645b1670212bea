package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/worker"
)

// logBuffer is an io.Writer for a test's logger, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// On the Apache Kafka 4.2 line the start-up checks warn that 4.2.0 must
// not be used (KAFKA-20505, its share-group deadlock, fixed in 4.2.1):
// 4.2.0 cannot be refused, because nothing over the protocol tells it
// from 4.2.1. On 4.3 and newer they say nothing of it. On kfake the
// release line is the highest metadata.version its ApiVersions report (29
// is 4.2's, 30 is 4.3's, measured on 4.2.2 and 4.3.1); a real broker is
// tested as it is.
func TestKafka42Warning(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		kfakeMV int16 // 0: a real broker's own
	}{{"4.2", 29}, {"4.3", 30}}
	if kafkatest.Real() {
		cases = cases[:1]
		cases[0].name, cases[0].kfakeMV = "real", 0
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 1)
			line := b.c.Version
			if tc.kfakeMV != 0 {
				pretendMetadataVersion(t, b, tc.kfakeMV)
				line = tc.name
			}
			var logs logBuffer
			w, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group),
				worker.Handle(b.topic, handler.Func(func(context.Context, *handler.Job) error { return nil })),
				worker.Logger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := w.Check(ctx); err != nil {
				t.Fatalf("Check: %v", err)
			}
			warned := strings.Contains(logs.String(), "KAFKA-20505")
			if want := line == "4.2"; warned != want {
				t.Fatalf("broker line %s: warned about 4.2.0 %v, want %v; logs:\n%s", line, warned, want, logs.String())
			}
			if warned {
				for _, want := range []string{"level=WARN", "Apache Kafka 4.2", "fixed in 4.2.1", "4.2.1 or newer", "metadata.version up to 29"} {
					if !strings.Contains(logs.String(), want) {
						t.Errorf("the warning does not say %q:\n%s", want, logs.String())
					}
				}
			}
			t.Logf("%s", logs.String())
		})
	}
}
