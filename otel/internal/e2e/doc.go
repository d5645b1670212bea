// Package e2e holds, in its tests only, what follows a job beyond the
// otel module's own tests: its trace through the Postgres outbox, and an
// export over OTLP/HTTP to a receiver. It is a module of its own so that
// the otel module requires neither a Postgres module nor an exporter: a
// user's go mod tidy reads the otel module's requirements, tests
// included.
package e2e
