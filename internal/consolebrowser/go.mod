module github.com/shareq/shareq/internal/consolebrowser

go 1.26.0

require (
	github.com/chromedp/cdproto v0.159.0
	github.com/chromedp/chromedp v0.23.0
	github.com/jackc/pgx/v5 v5.13.0
	github.com/shareq/shareq v0.1.0
	github.com/shareq/shareq/console v0.1.0
	github.com/shareq/shareq/joblog/pgjoblog v0.1.0
	github.com/shareq/shareq/migrations v0.1.0
	github.com/twmb/franz-go v1.22.3
	go.uber.org/goleak v1.3.0
)

require (
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/shareq/shareq/enqueue/pgoutbox v0.1.0 // indirect
	github.com/shareq/shareq/idempotency/pgstore v0.1.0 // indirect
	github.com/sourcegraph/conc v0.3.0 // indirect
	github.com/twmb/franz-go/pkg/kadm v1.20.0 // indirect
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

// A development module, never published: it builds from the tree's shareq
// modules also without go.work (GOWORK=off), through these lines. A published
// module has none (docs/development.md, "Module versions").
replace (
	github.com/shareq/shareq => ../..
	github.com/shareq/shareq/console => ../../console
	github.com/shareq/shareq/enqueue/pgoutbox => ../../enqueue/pgoutbox
	github.com/shareq/shareq/idempotency/pgstore => ../../idempotency/pgstore
	github.com/shareq/shareq/joblog/pgjoblog => ../../joblog/pgjoblog
	github.com/shareq/shareq/migrations => ../../migrations
)
