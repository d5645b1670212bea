module github.com/shareq/shareq/examples

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.13.0
	github.com/prometheus/client_golang v1.25.0
	github.com/shareq/shareq v0.1.0
	github.com/shareq/shareq/console v0.1.0
	github.com/shareq/shareq/enqueue/pgoutbox v0.1.0
	github.com/shareq/shareq/idempotency/pgstore v0.1.0
	github.com/shareq/shareq/metrics v0.1.0
	github.com/shareq/shareq/migrations v0.1.0
	github.com/shareq/shareq/scheduler v0.1.0
	github.com/shareq/shareq/shareqotel v0.1.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kadm v1.20.0
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp v1.47.0
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/proto/otlp v1.11.0
	go.uber.org/goleak v1.3.0
	golang.org/x/image v0.48.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.30.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/shareq/shareq/joblog/pgjoblog v0.1.0 // indirect
	github.com/sourcegraph/conc v0.3.0 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/exporters/otlp/otlptrace v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.44.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260928230214-8a89bd6388cc // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260928230214-8a89bd6388cc // indirect
	google.golang.org/grpc v1.83.2 // indirect
)

// A development module, never published: it builds from the tree's shareq
// modules also without go.work (GOWORK=off), through these lines. A published
// module has none (docs/development.md, "Module versions").
replace (
	github.com/shareq/shareq => ..
	github.com/shareq/shareq/console => ../console
	github.com/shareq/shareq/enqueue/pgoutbox => ../enqueue/pgoutbox
	github.com/shareq/shareq/idempotency/pgstore => ../idempotency/pgstore
	github.com/shareq/shareq/joblog/pgjoblog => ../joblog/pgjoblog
	github.com/shareq/shareq/metrics => ../metrics
	github.com/shareq/shareq/migrations => ../migrations
	github.com/shareq/shareq/scheduler => ../scheduler
	github.com/shareq/shareq/shareqotel => ../shareqotel
)
