"""The large-message bench (bench/large.py) in miniature: one small body size against amqpd, every message
published and consumed, no queue left afterwards. The full run (1 MiB and 16 MiB beside RabbitMQ) is
`python -m bench.large`."""

from __future__ import annotations

from amqpd.testing import BrokerProcess, ManagementClient
from bench.large import run, table


def test_bench_large_small_run_moves_every_body_and_leaves_nothing() -> None:
    with BrokerProcess(management=True) as amqpd:
        assert amqpd.proc is not None
        results = run({"amqpd": (amqpd.url, amqpd.proc.pid)}, rounds=1, sizes={"300KiB": (300 * 1024, 4)})
        admin = ManagementClient(amqpd.mgmt_url)
        assert admin.request("GET", "/queues") == []
        admin.close()
    assert set(results) == {("300KiB", "transient", "amqpd"), ("300KiB", "persistent", "amqpd")}
    for published, consumed in results.values():
        assert published.mib_per_s > 0 and consumed.mib_per_s > 0
    assert "| 300KiB | persistent | amqpd |" in table(results, ["amqpd"])
