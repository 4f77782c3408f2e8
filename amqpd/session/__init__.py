"""The AMQP adapter: connection and channel state machines, parse -> call the broker -> encode."""
