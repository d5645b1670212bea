// Package secure holds the tests of shareq against a secured Kafka: the
// broker of scripts/kafka-secure.sh (SASL_SSL with SCRAM-SHA-512, mTLS,
// and the StandardAuthorizer denying whatever no ACL allows). They run
// when SHAREQ_TEST_SECURE names that broker's secure.env
// (internal/kafkatest.Secure) and skip otherwise: kfake has no TLS or
// authorizer. scripts/test.sh runs them in a step of its own.
//
// What they pin down: the worker (its start-up checks and its share-group
// member), the dlq producer, the lag collector and the enqueue producer
// work over SCRAM-SHA-512 on TLS and over mTLS; a wrong password, an
// untrusted certificate and a plaintext client on a TLS port fail at
// start with an error that says so, within the start-up timeout; each
// ACL of docs/security.md, removed alone, makes the worker fail at start
// (or, for the DLQ topic, park nothing and release) with an error naming
// the right and the kafka-acls.sh line that grants it; and the SCRAM
// password never shows in logs, metrics, DLQ records or errors.
package secure
