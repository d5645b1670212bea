DROP TABLE IF EXISTS shareq_outbox;
DROP FUNCTION IF EXISTS shareq_outbox_notify();
