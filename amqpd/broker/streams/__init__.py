"""Stream queues: the log, cursors, replay and chunk deliveries."""
