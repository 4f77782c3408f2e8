"""Stream queues over AMQP 0-9-1 (RabbitMQ 3.10 has them without a plugin): declaration rules, what a
stream refuses, x-stream-offset in every form, the x-stream-offset header, prefetch, tail consumers,
several consumers at different offsets, retention, and a stream bound to an exchange with '#'.

Each publish is confirmed before the next, so on RabbitMQ every message is a chunk of its own and `last`
names the last message on both brokers. Where RabbitMQ 3.10 crashes with 541 (an offset string it cannot
parse) or drops header tables and arrays, the scenario asserts amqpd's documented better answer."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pika

from interop import pika_tools as pt
from interop.registry import add, scenario
from interop.scope import Scope, pika_session

STREAM = {"x-queue-type": "stream"}


def _stream(s: Scope, ch: Any, base: str = "s", **arguments: Any) -> str:
    name = s.queue(base)
    ch.queue_declare(name, durable=True, arguments={**STREAM, **arguments})
    return name


def _publish(ch: Any, name: str, count: int, start: int = 0, **headers: Any) -> None:
    ch.confirm_delivery()
    for i in range(start, start + count):
        props = pika.BasicProperties(headers={"i": i, **headers})
        ch.basic_publish("", name, b"m%d" % i, props)


def _read(
    ch: Any, name: str, count: int, offset: Any = None, quiet: float = 0.3, ack: bool = True, **arguments: Any
) -> list[Any]:
    """(x-stream-offset, body) of what a consumer from `offset` gets (waiting `quiet` s for extra ones)."""
    if offset is not None:
        arguments["x-stream-offset"] = offset
    got = pt.consume_n(ch, name, count, quiet=quiet, arguments=arguments)
    if ack:
        for m, _, _ in got:
            ch.basic_ack(m.delivery_tag)
    return [[p.headers.get("x-stream-offset"), b.decode()] for _, p, b in got]


# --- declaring -------------------------------------------------------------------------------------------


def _declare_refused(flags: dict[str, Any], arguments: dict[str, Any]) -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            name = s.queue("s")
            return pt.expect_close(lambda: ch.queue_declare(name, arguments={**STREAM, **arguments}, **flags))

    return run


_DECLARES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("non_durable_406", {}, {}),
    ("exclusive_406", {"durable": True, "exclusive": True}, {}),
    ("auto_delete_406", {"durable": True, "auto_delete": True}, {}),
    ("max_age_bad_unit_406", {"durable": True}, {"x-max-age": "1x"}),
    ("max_age_zero_406", {"durable": True}, {"x-max-age": "0D"}),
    ("max_age_two_units_406", {"durable": True}, {"x-max-age": "1D1h"}),
    ("max_age_integer_406", {"durable": True}, {"x-max-age": 5}),
    ("max_age_each_unit_ok", {"durable": True}, {"x-max-age": "7D"}),
    ("max_age_years_ok", {"durable": True}, {"x-max-age": "1Y"}),
    ("max_length_bytes_negative_406", {"durable": True}, {"x-max-length-bytes": -1}),
    ("max_length_bytes_string_406", {"durable": True}, {"x-max-length-bytes": "1"}),
    ("segment_size_negative_406", {"durable": True}, {"x-stream-max-segment-size-bytes": -1}),
    ("segment_size_zero_ok", {"durable": True}, {"x-stream-max-segment-size-bytes": 0}),
    ("max_length_refused_406", {"durable": True}, {"x-max-length": 10}),
    ("message_ttl_refused_406", {"durable": True}, {"x-message-ttl": 1000}),
    ("dead_letter_refused_406", {"durable": True}, {"x-dead-letter-exchange": "x"}),
    ("max_priority_refused_406", {"durable": True}, {"x-max-priority": 5}),
    ("overflow_refused_406", {"durable": True}, {"x-overflow": "reject-publish"}),
    ("single_active_refused_406", {"durable": True}, {"x-single-active-consumer": True}),
    ("expires_refused_406", {"durable": True}, {"x-expires": 1000}),
    ("queue_mode_refused_406", {"durable": True}, {"x-queue-mode": "lazy"}),
    ("unknown_argument_ok", {"durable": True}, {"x-foo": 1}),
]
for _name, _flags, _args in _DECLARES:
    add("streams", f"declare_{_name}", _declare_refused(_flags, _args))


def _redeclare(second: dict[str, Any], durable: bool = True) -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            name = _stream(
                s, ch, **{"x-max-age": "1D", "x-max-length-bytes": 1000, "x-stream-max-segment-size-bytes": 500}
            )
            return pt.expect_close(lambda: ch.queue_declare(name, durable=durable, arguments=second))

    return run


_SAME = {**STREAM, "x-max-age": "1D", "x-max-length-bytes": 1000, "x-stream-max-segment-size-bytes": 500}
for _name, _second in [
    ("same_ok", _SAME),
    ("other_max_age_406", {**_SAME, "x-max-age": "2D"}),
    ("other_max_bytes_406", {**_SAME, "x-max-length-bytes": 2000}),
    ("other_segment_size_406", {**_SAME, "x-stream-max-segment-size-bytes": 600}),
    ("as_classic_406", {}),
]:
    add("streams", f"redeclare_{_name}", _redeclare(_second))


@scenario("streams")
def redeclare_ok_and_delete_ok_counts_none(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        _publish(ch, name, 3)
        # RabbitMQ's message_count for a stream lags (its queue stats are sampled): not observed. amqpd's is
        # the stream's length at once; delete-ok counts none on both.
        again = pt.summarize(ch.queue_declare(name, durable=True, arguments=STREAM))
        deleted = pt.summarize(ch.queue_delete(name))
        return {"again": {k: v for k, v in again.items() if k != "message_count"}, "deleted": deleted}


# --- what a stream refuses -------------------------------------------------------------------------------


@scenario("streams")
def get_540(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        return pt.expect_close(lambda: ch.basic_get(name))


@scenario("streams")
def purge_540(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        return pt.expect_close(lambda: ch.queue_purge(name))


@scenario("streams")
def consume_without_prefetch_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        return pt.expect_close(lambda: pt.consume_n(ch, name, 1, timeout=0.5))


@scenario("streams")
def consume_with_global_prefetch_only_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        ch.basic_qos(prefetch_count=10, global_qos=True)
        return pt.expect_close(lambda: pt.consume_n(ch, name, 1, timeout=0.5))


@scenario("streams")
def consume_no_ack_540(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        ch.basic_qos(prefetch_count=10)
        return pt.expect_close(lambda: pt.consume_n(ch, name, 1, timeout=0.5, auto_ack=True))


@scenario("streams")
def consumer_priority_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        ch.basic_qos(prefetch_count=10)
        return pt.expect_close(lambda: pt.consume_n(ch, name, 1, timeout=0.5, arguments={"x-priority": 1}))


def _settle_refused(how: str) -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            name = _stream(s, ch)
            _publish(ch, name, 2)
            ch.basic_qos(prefetch_count=10)
            got = pt.consume_n(ch, name, 2, arguments={"x-stream-offset": "first"})

            def settle() -> Any:
                tag = got[0][0].delivery_tag
                ch.basic_nack(tag) if how == "nack" else ch.basic_reject(tag, requeue=False)
                pt.pump(conn, 1.0)

            return {"got": len(got), "close": pt.expect_close(settle)}

    return run


add("streams", "nack_540", _settle_refused("nack"))
add("streams", "reject_540", _settle_refused("reject"))


@scenario("streams")
def nack_over_a_queue_and_a_stream_540_requeues_the_queues(url: str) -> Any:
    """A multiple nack naming a stream's delivery closes the connection with 540; the classic queue's
    deliveries it named too come back to their queue, as every unacked delivery of a closed connection does."""
    with pika_session(url) as (s, conn, ch):
        queue = s.queue("q")
        ch.queue_declare(queue)
        name = _stream(s, ch)
        _publish(conn.channel(), queue, 2)
        _publish(conn.channel(), name, 2)
        ch.basic_qos(prefetch_count=10)
        got = [len(pt.consume_n(ch, queue, 2)), len(pt.consume_n(ch, name, 2, arguments={"x-stream-offset": "first"}))]

        def settle() -> Any:
            ch.basic_nack(4, multiple=True)  # tags 1-2 the queue's, 3-4 the stream's
            pt.pump(conn, 1.0)

        close = pt.expect_close(settle)
        other = pt.connect(url)
        try:
            counts = other.channel()
            deadline = time.monotonic() + 3.0  # the requeue on close may lag the close itself
            while (n := counts.queue_declare(queue, passive=True).method.message_count) < 2:
                if time.monotonic() > deadline:
                    break
                pt.pump(other, 0.1)
        finally:
            pt.close_quietly(other)
        return {"got": got, "close": close, "back_in_queue": n}


# --- reading ---------------------------------------------------------------------------------------------


def _offset_case(offset: Any, expect: int) -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            name = _stream(s, ch)
            _publish(ch, name, 5)
            ch.basic_qos(prefetch_count=10)
            return _read(ch, name, expect, offset)

    return run


_OLD = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
_FUTURE = datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC)
for _name, _offset, _expect in [
    ("first", "first", 5),
    ("last", "last", 1),
    ("next", "next", 0),
    ("default_is_next", None, 0),
    ("numeric", 2, 3),
    ("zero", 0, 5),
    ("negative_reads_from_first", -1, 5),
    ("timestamp_old", _OLD, 5),
    ("timestamp_future", _FUTURE, 0),
    ("interval_1h", "1h", 5),
    ("interval_30m", "30m", 5),
    # pika and Go send bytes as a byte array ('x'), not a longstr: RabbitMQ reads the three words either way
    ("bytes_first", b"first", 5),
    ("bytes_last", b"last", 1),
    ("bytes_next", b"next", 0),
]:
    add("streams", f"offset_{_name}", _offset_case(_offset, _expect))


def _bad_offset(offset: Any) -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            name = _stream(s, ch)
            ch.basic_qos(prefetch_count=10)
            return pt.expect_close(
                lambda: pt.consume_n(ch, name, 1, timeout=0.5, arguments={"x-stream-offset": offset})
            )

    return run


add("streams", "offset_bad_unit_406", _bad_offset("1x"))
add("streams", "offset_digits_string_406", _bad_offset("5"))
add("streams", "offset_two_units_406", _bad_offset("2h30m"))


def _crash_541_becomes_406(ref: Any, tgt: Any) -> str | None:
    """RabbitMQ 3.10 crashes the connection (541) on an offset it cannot parse; amqpd refuses it like the
    ones RabbitMQ does parse: channel.close 406 naming basic.consume."""
    if not isinstance(ref, dict) or ref.get("code") != 541:
        return f"RabbitMQ no longer answers 541 here (saw {ref!r}): update the scenario"
    want = {"closed": "channel", "code": 406, "text": "PRECONDITION_FAILED", "class_id": 60, "method_id": 20}
    return None if tgt == want else f"expected {want}, got {tgt!r}"


add("streams", "offset_word_406_not_541", _bad_offset("foo"), compare=_crash_541_becomes_406)
add("streams", "offset_bool_406_not_541", _bad_offset(True), compare=_crash_541_becomes_406)
# A byte array other than the three words (an interval, a word, digits) crashes RabbitMQ 3.10 too.
add("streams", "offset_bytes_interval_406_not_541", _bad_offset(b"1h"), compare=_crash_541_becomes_406)
add("streams", "offset_bytes_word_406_not_541", _bad_offset(b"foo"), compare=_crash_541_becomes_406)


@scenario("streams")
def offset_past_the_end_waits_for_it(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        _publish(ch, name, 5)
        ch.basic_qos(prefetch_count=10)
        got: list[Any] = []
        ch.basic_consume(
            name,
            lambda c, m, p, b: got.append([p.headers["x-stream-offset"], b.decode()]),
            arguments={"x-stream-offset": 7},
        )
        pt.pump(conn, 0.3)
        before = list(got)
        other = conn.channel()
        _publish(other, name, 3, start=5)
        pt.settle(conn, lambda: len(got))
        return {"before": before, "after": got}


@scenario("streams")
def tail_consumer_gets_new_messages(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        _publish(ch, name, 2)
        ch.basic_qos(prefetch_count=10)
        got: list[Any] = []
        ch.basic_consume(name, lambda c, m, p, b: got.append([p.headers["x-stream-offset"], b.decode()]))
        pt.pump(conn, 0.3)
        _publish(conn.channel(), name, 2, start=2)
        pt.settle(conn, lambda: len(got))
        return got


@scenario("streams")
def delivery_fields_and_offset_header(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        _publish(ch, name, 2, text="x", n=7)
        ch.basic_qos(prefetch_count=10)
        got = pt.consume_n(ch, name, 2, arguments={"x-stream-offset": "first"})
        out = []
        for m, p, b in got:
            o = pt.msg_obs(m, p, b, with_props=True)
            o["header_offset_type"] = type(p.headers["x-stream-offset"]).__name__
            out.append(o)
        return out


@scenario("streams")
def prefetch_limits_unacked_deliveries(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        _publish(ch, name, 6)
        ch.basic_qos(prefetch_count=2)
        got: list[Any] = []
        ch.basic_consume(name, lambda c, m, p, b: got.append(m), arguments={"x-stream-offset": "first"})
        pt.settle(conn, lambda: len(got))
        first = len(got)
        ch.basic_ack(got[-1].delivery_tag, multiple=True)
        pt.settle(conn, lambda: len(got))
        return {"before_ack": first, "after_ack": len(got), "tags": [m.delivery_tag for m in got]}


@scenario("streams")
def consumers_at_different_offsets(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        _publish(ch, name, 4)
        ch.basic_qos(prefetch_count=10)
        return {
            "a_first": _read(ch, name, 4, "first"),
            "b_from_2": _read(ch, name, 2, 2),
            "c_last": _read(ch, name, 1, "last"),
            "a_again": _read(ch, name, 4, "first"),
        }


@scenario("streams")
def acks_remove_nothing(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        _publish(ch, name, 3)
        ch.basic_qos(prefetch_count=10)
        first = _read(ch, name, 3, "first")
        return {"first": first, "again": _read(ch, name, 3, "first")}


@scenario("streams")
def transient_messages_are_kept_too(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        ch.confirm_delivery()
        ch.basic_publish("", name, b"transient", pika.BasicProperties(delivery_mode=1))
        ch.basic_publish("", name, b"persistent", pika.BasicProperties(delivery_mode=2))
        ch.basic_qos(prefetch_count=10)
        return _read(ch, name, 2, "first")


@scenario("streams")
def stream_bound_to_an_exchange_logs_it(url: str) -> Any:
    """The seed design's log per exchange: a stream bound with '#' keeps everything published there."""
    with pika_session(url) as (s, conn, ch):
        x = s.exchange("x")
        ch.exchange_declare(x, "topic")
        name = _stream(s, ch)
        ch.queue_bind(name, x, "#")
        ch.confirm_delivery()
        for key in ("a.b", "c", "d.e.f"):
            ch.basic_publish(x, key, key.encode())
        ch.basic_qos(prefetch_count=10)
        got = pt.consume_n(ch, name, 3, arguments={"x-stream-offset": "first"})
        return [[m.exchange == x, m.routing_key, b.decode()] for m, _, b in got]


def _dense_offsets(ref: Any, tgt: Any) -> str | None:
    """RabbitMQ's offsets skip numbers (its log holds more than messages); amqpd's are dense: each message
    is the next integer. Everything else observed must agree."""
    rest = {k: v for k, v in ref.items() if k != "offsets_dense"}
    if {k: v for k, v in tgt.items() if k != "offsets_dense"} != rest:
        return f"expected {rest} besides dense offsets, got {tgt!r}"
    return None if tgt.get("offsets_dense") is True else f"expected dense offsets, got {tgt!r}"


@scenario("streams", compare=_dense_offsets)
def retention_by_max_length_bytes_drops_the_oldest(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch, **{"x-max-length-bytes": 20_000, "x-stream-max-segment-size-bytes": 5_000})
        ch.confirm_delivery()
        for i in range(200):
            ch.basic_publish("", name, b"%05d" % i + b"." * 995)
        ch.basic_qos(prefetch_count=300)
        got = pt.consume_n(ch, name, 200, timeout=2.0, arguments={"x-stream-offset": "first"})
        offsets = [p.headers["x-stream-offset"] for _, p, _ in got]
        numbers = [int(b[:5]) for _, _, b in got]
        return {
            "oldest_dropped": bool(numbers) and numbers[0] > 0,
            "kept_at_most_a_quarter": len(numbers) <= 50,
            "kept_the_newest_in_order": numbers == list(range(numbers[0], 200)) if numbers else False,
            "offsets_dense": offsets == numbers,
        }


# --- documented improvements ----------------------------------------------------------------------------


def _keeps_tables_and_arrays(ref: Any, tgt: Any) -> str | None:
    """RabbitMQ 3.10 drops table and array headers of stream messages; amqpd keeps every header."""
    if ref.get("t") is not None or ref.get("arr") is not None:
        return f"RabbitMQ now keeps table/array headers (saw {ref!r}): use plain equality"
    want = {"t": {"a": 1}, "arr": [1, "x"], "i": 0, "x-stream-offset": 0}
    return None if tgt == want else f"expected {want}, got {tgt!r}"


@scenario("streams", compare=_keeps_tables_and_arrays)
def table_and_array_headers(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        ch.confirm_delivery()
        ch.basic_publish("", name, b"m", pika.BasicProperties(headers={"t": {"a": 1}, "arr": [1, "x"], "i": 0}))
        ch.basic_qos(prefetch_count=10)
        ((_, p, _),) = pt.consume_n(ch, name, 1, arguments={"x-stream-offset": "first"})
        return {k: pt.jsonable(v) for k, v in p.headers.items()}


# --- the last rules: server-named, a stream's arguments elsewhere, exclusive consumers, recover ---------------


def _server_named(queue_type: str) -> Any:
    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):

            def declare() -> Any:
                ok = ch.queue_declare("", durable=True, arguments={"x-queue-type": queue_type})
                s.track_queue(ok.method.queue)
                return ok

            return pt.expect_close(declare)

    return run


add("streams", "declare_server_named_406", _server_named("stream"))
add("streams", "declare_server_named_quorum_406", _server_named("quorum"))


def _offset_on_a_queue(queue_type: str) -> Any:
    """x-stream-offset on a consumer of a queue that is not a stream is refused, naming the queue's type."""

    def run(url: str) -> Any:
        with pika_session(url) as (s, conn, ch):
            name = s.queue("q")
            ch.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
            return pt.expect_close(lambda: ch.basic_consume(name, lambda *a: None, arguments={"x-stream-offset": 0}))

    return run


add("streams", "offset_on_a_classic_queue_406", _offset_on_a_queue("classic"))
add("streams", "offset_on_a_quorum_queue_406", _offset_on_a_queue("quorum"))


@scenario("streams")
def exclusive_consumer_reads_beside_others(url: str) -> Any:
    """RabbitMQ 3.10's streams ignore exclusive: consumers on this and another connection, exclusive or not,
    each read the whole log."""
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        _publish(conn.channel(), name, 3)
        ch.basic_qos(prefetch_count=10)
        mine: list[Any] = []
        ch.basic_consume(
            name, lambda c, m, p, b: mine.append(b.decode()), exclusive=True, arguments={"x-stream-offset": "first"}
        )
        pt.settle(conn, lambda: len(mine))
        other = pt.connect(url)
        try:
            och = other.channel()
            och.basic_qos(prefetch_count=10)
            beside = pt.expect_close(
                lambda: [b.decode() for _, _, b in pt.consume_n(och, name, 3, arguments={"x-stream-offset": "first"})]
            )
            second = pt.expect_close(
                lambda: bool(och.basic_consume(name, lambda *a: None, exclusive=True)) if och.is_open else "closed"
            )
        finally:
            pt.close_quietly(other)
        return {"exclusive": mine, "beside": beside, "second_exclusive": second}


def _recover_540_not_541(ref: Any, tgt: Any) -> str | None:
    """RabbitMQ 3.10 crashes the connection (541) on basic.recover with a stream's deliveries unacked; amqpd
    answers as for the stream's nack and reject: 540, naming basic.recover."""
    if not isinstance(ref, dict) or ref.get("close", {}).get("code") != 541:
        return f"RabbitMQ no longer answers 541 here (saw {ref!r}): update the scenario"
    want = {"closed": "connection", "code": 540, "text": "NOT_IMPLEMENTED", "class_id": 60, "method_id": 110}
    got = tgt.get("close") if isinstance(tgt, dict) else None
    if got != want or tgt.get("got") != ref.get("got"):
        return f"expected {want} after {ref.get('got')} deliveries, got {tgt!r}"
    return None


@scenario("streams", compare=_recover_540_not_541)
def recover_with_a_streams_deliveries_540_not_541(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        name = _stream(s, ch)
        _publish(conn.channel(), name, 2)
        ch.basic_qos(prefetch_count=10)
        got: list[Any] = []
        ch.basic_consume(name, lambda c, m, p, b: got.append(b.decode()), arguments={"x-stream-offset": "first"})
        pt.settle(conn, lambda: len(got))

        def recover() -> Any:
            ch.basic_recover(requeue=True)
            pt.pump(conn, 0.5)

        return {"got": len(got), "close": pt.expect_close(recover)}
