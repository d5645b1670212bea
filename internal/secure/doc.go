// Package secure holds the tests of shareq against a secured Kafka: the
// broker of scripts/kafka-secure.sh (SASL_SSL with SCRAM-SHA-512, mTLS,
// and the StandardAuthorizer denying whatever no ACL allows). They run
// when SHAREQ_TEST_SECURE names that broker's secure.env
// (internal/kafkatest.Secure) and skip otherwise; scripts/test.sh runs
// them in a step of its own. The ACL tests also run on kfake with SCRAM
// users and ACLs enforced (internal/kafkatest.SecureFake), in every
// go test ./..., except the cases kfake does not authorize (group
// configs) or lacks (share-group dead-letter topics), which skip saying
// so.
//
// What they pin down: every client shareq makes (the worker's start-up
// checks and share-group member, the dlq producer, the enqueue producer,
// the outbox relay and the lag collector) works over SCRAM-SHA-512 on TLS
// and over mTLS; a wrong password, an untrusted certificate and a
// plaintext client on a TLS port fail at start with an error that says
// so, within the start-up timeout; each ACL of docs/security.md, removed
// alone, makes the worker fail at start (or, for the DLQ topic, park
// nothing and release) with an error naming the right and the
// kafka-acls.sh line that grants it; and the SCRAM passwords never show
// in logs, metrics, DLQ records or errors.
package secure
