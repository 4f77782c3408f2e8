"""The per-object bench (bench/scale.py) in miniature: every phase runs against amqpd at two sizes, the broker's
objects are gone afterwards, and the table has a row per phase and size and a growth line per phase.
The full run (1k and 10k queues, 100 and 1k connections, beside RabbitMQ) is `python -m bench.scale`."""

from __future__ import annotations

from amqpd.testing import BrokerProcess, ManagementClient
from bench.scale import PHASES, Broker, run, table


def test_bench_scale_small_run_measures_every_phase_and_leaves_nothing() -> None:
    with BrokerProcess(management=True) as amqpd:
        assert amqpd.proc is not None
        broker = Broker("amqpd", amqpd.url, amqpd.mgmt_url, amqpd.proc.pid)
        run(broker, sizes=[20, 40], connections=[3, 6])
        admin = ManagementClient(amqpd.mgmt_url)
        assert [v["name"] for v in admin.request("GET", "/vhosts")] == ["/"]
        admin.close()
    assert not broker.stopped_at
    phases = {phase for phase, _ in broker.results}
    assert phases == set(PHASES)
    assert broker.results[("queue.declare", 40)].count == 40
    assert broker.results[("queue.delete", 40)].count == 20  # half deleted one by one, the rest with the vhost
    assert broker.results[("vhost.delete/queue", 40)].count == 20 + 40  # and the 40 imported from definitions
    report = table([broker])
    for phase in PHASES[:-1]:  # one size only for the 1k channels
        assert f"amqpd    {phase:20}" in report, phase
