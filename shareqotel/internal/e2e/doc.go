// Package e2e holds, in its tests only, what follows a job beyond the
// shareqotel module's own tests: its trace through the Postgres outbox, and an
// export over OTLP/HTTP to a receiver. It is a module of its own so that
// the shareqotel module requires neither a Postgres module nor an exporter: a
// user's go mod tidy reads the shareqshareqotel module's requirements, tests
// included.
package e2e
