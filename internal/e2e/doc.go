// Package e2e holds end-to-end tests of the whole shareq stack: a real
// worker with the real idempotency, pgstore and dlq middleware, against
// Kafka (kfake by default, or the real broker named by
// SHAREQ_TEST_BROKERS, through internal/kafkatest) and Postgres (the
// database named by SHAREQ_TEST_DATABASE_URL, one schema per test).
//
// The package has no code of its own; everything is in its tests.
package e2e
