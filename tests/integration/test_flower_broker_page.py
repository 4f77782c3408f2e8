"""Celery Flower's broker page reads queues through the management API: its own client code, unchanged,
against amqpd."""

from __future__ import annotations

import asyncio

import pika
import pytest
from flower.utils.broker import Broker

from amqpd.testing import BrokerProcess

pytestmark = pytest.mark.amqpd_only


def test_flowers_broker_page_sees_queue_lengths_and_consumers() -> None:
    with BrokerProcess(management=True) as broker:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("celery")
        ch.queue_declare("other")
        for _ in range(4):
            ch.basic_publish("", "celery", b"task")
        ch.queue_declare("busy")
        ch.basic_consume("busy", lambda *a: None)
        # The broker URL as Celery's documentation writes it ("//" is the vhost "/"), Flower's --broker-api URL.
        flower = Broker(f"amqp://guest:guest@127.0.0.1:{broker.port}//", http_api=broker.mgmt_url + "/api/")
        queues = asyncio.run(flower.queues(["celery", "busy"]))
        conn.close()
    by_name = {q["name"]: q for q in queues}
    assert sorted(by_name) == ["busy", "celery"]
    assert (by_name["celery"]["messages"], by_name["celery"]["messages_ready"]) == (4, 4)
    assert by_name["busy"]["consumers"] == 1
