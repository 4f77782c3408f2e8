"""Management: RabbitMQ's HTTP API and Prometheus metrics on listeners of their own (same event loop as the
broker), and amqpctl, the command line that talks to the API."""
