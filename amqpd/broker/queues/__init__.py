"""Classic queues: the queue, its backlog and ready list, deduplication, limits and flow."""
