"""Side-by-side benchmarks of amqpd and RabbitMQ with a raw-socket, multi-process load generator."""
