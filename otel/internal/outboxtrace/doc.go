// Package outboxtrace holds, in its tests only, the trace of a job
// through the Postgres outbox. It is a module of its own so that the otel
// module needs no Postgres module: a user's go mod tidy reads the otel
// module's requirements, tests included.
package outboxtrace
