"""amqpd: a lightweight AMQP 0-9-1 broker that RabbitMQ clients use unchanged."""

__version__ = "0.1.0"
