"""The replay-under-publishing bench (bench/loop_reads.py) in miniature, beside the reference RabbitMQ: both
brokers fill a stream, take confirmed publishes alone and while a consumer replays the stream, and report each
phase; the vhost made on RabbitMQ for the run is gone afterwards. The full run is `python -m bench.loop_reads
--mb 2048 --rate 1000 --rounds 3 --rabbitmq`."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import unquote, urlsplit

import aiormq
import pytest

from amqpd.testing import ManagementClient
from bench import loop_reads

MANAGEMENT = loop_reads.REFERENCE_MANAGEMENT_URL


def run_vhosts() -> list[str]:
    admin = ManagementClient(MANAGEMENT)
    try:
        return [v["name"] for v in admin.request("GET", "/vhosts") if v["name"].startswith("bench-loop-reads")]
    finally:
        admin.close()


def test_each_round_runs_on_amqpd_then_on_rabbitmq(capsys: pytest.CaptureFixture[str]) -> None:
    before = run_vhosts()
    args = ["--mb", "8", "--rounds", "1", "--seconds", "1", "--rate", "200", "--rabbitmq"]
    assert loop_reads.main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["stream_mib"], report["messages"]) == (8, 512)
    for side in ("this", "rabbitmq"):  # "this": the amqpd this process imports
        (round_,) = report[side]["rounds"]
        assert round_["publishes_during_replay"] > 0  # confirmed while the 512 deliveries went out
        assert round_["idle_confirm_p99_ms"] > 0 and round_["replay_confirm_p99_ms"] > 0
        assert round_["replay_mib_per_s"] > 0
    expected = report["rabbitmq"]["median_replay_confirm_p99_ms"] / report["this"]["median_replay_confirm_p99_ms"]
    assert report["rabbitmq_over_amqpd"] == pytest.approx(expected, abs=0.01)
    assert run_vhosts() == before


async def product_at(url: str) -> str:
    conn = await aiormq.connect(url)
    try:
        return str(conn.server_properties["product"])
    finally:
        await conn.close()


def test_the_reference_side_is_rabbitmq_in_a_vhost_removed_afterwards() -> None:
    reference = loop_reads.Reference(loop_reads.REFERENCE_URL, MANAGEMENT)
    with loop_reads.reference_vhost(reference) as others:
        ((url, pid),) = others.values()
        assert asyncio.run(product_at(url)) == "RabbitMQ"
        vhost = unquote(urlsplit(url).path[1:])
        assert vhost in run_vhosts()
    assert pid > 0
    assert vhost not in run_vhosts()
