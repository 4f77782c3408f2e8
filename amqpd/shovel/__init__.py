"""Dynamic shovels (RabbitMQ's rabbitmq_shovel): a runtime parameter of component `shovel` that moves messages
from a queue or exchange of one AMQP 0-9-1 broker to another, as a client of both, on the broker's event loop.

Above the broker (it registers on `broker.parameters`), below mgmt (which reads its status)."""
