DROP TABLE IF EXISTS shareq_scheduler_state;
