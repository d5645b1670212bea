module github.com/shareq/shareq/internal/cmd/shareq-soak

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.13.0
	github.com/shareq/shareq v0.1.0
	github.com/shareq/shareq/enqueue/pgoutbox v0.1.0
	github.com/shareq/shareq/idempotency/pgstore v0.1.0
	github.com/shareq/shareq/migrations v0.1.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kadm v1.20.0
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
	go.uber.org/goleak v1.3.0
	gonum.org/v1/plot v0.17.0
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/sourcegraph/conc v0.3.0 // indirect
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c // indirect
	golang.org/x/image v0.30.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

// A development module, never published: it builds from the tree's shareq
// modules also without go.work (GOWORK=off), through these lines. A published
// module has none (docs/development.md, "Module versions").
replace (
	github.com/shareq/shareq => ../../..
	github.com/shareq/shareq/enqueue/pgoutbox => ../../../enqueue/pgoutbox
	github.com/shareq/shareq/idempotency/pgstore => ../../../idempotency/pgstore
	github.com/shareq/shareq/migrations => ../../../migrations
)
