"""Run amqpd from a test suite.

- `BrokerProcess`: a subprocess on ephemeral ports, stopped when the block ends.
- `EmbeddedBroker`: a broker in a background thread of this process, in memory.
- `IsolatedVhost`: a vhost and a user of their own for one test (amqpd or RabbitMQ, through the management API).
- `amqpd.testing.pytest_plugin`: the fixtures built on these (registered as the `amqpd` pytest plugin).

with BrokerProcess() as broker:
    pika.BlockingConnection(pika.URLParameters(broker.url))

This package is imported by pytest in every session where amqpd is installed: it imports the broker itself only
when a broker is started.
"""

from amqpd.testing.embedded import BrokerStartError, EmbeddedBroker
from amqpd.testing.process import BrokerProcess
from amqpd.testing.vhosts import IsolatedVhost, ManagementClient

__all__ = ["BrokerProcess", "BrokerStartError", "EmbeddedBroker", "IsolatedVhost", "ManagementClient"]
