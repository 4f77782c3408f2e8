"""Publisher confirms (as the set of confirmed sequence numbers), mandatory returns, transactions."""

from __future__ import annotations

from typing import Any

import pika
from pamqp import commands as C

from interop import pika_tools as pt
from interop.rawamqp import RawConnection, until_close
from interop.registry import scenario
from interop.scope import Scope, pika_session


def _confirm_events(
    c: RawConnection, expect: int, return_seqs: tuple[int, ...] = (), timeout: float = 3.0
) -> dict[str, Any]:
    """Read frames until `expect` seqs are confirmed: the acked/nacked sets, and each return with whether
    its message (seq `return_seqs[i]`) had already been confirmed — a return must come first. How
    acks are coalesced (multiple=true) legitimately differs, so only the sets are compared."""
    acked: set[int] = set()
    nacked: set[int] = set()
    events: list[Any] = []
    highest = 0
    while len(acked) + len(nacked) < expect:
        r = c.recv_method(timeout)
        if isinstance(r, str):
            events.append(r)
            break
        f = r[1]
        if f.name in ("Basic.Ack", "Basic.Nack"):
            tags = range(highest + 1, f.delivery_tag + 1) if f.multiple else [f.delivery_tag]
            target = acked if f.name == "Basic.Ack" else nacked
            target.update(tags)
            highest = max(highest, f.delivery_tag)
        elif f.name == "Basic.Return":
            seq = return_seqs[len(events)] if len(events) < len(return_seqs) else None
            events.append(
                {
                    "return": f.reply_code,
                    "text": f.reply_text,
                    "routing_key": f.routing_key,
                    "its_confirm_came_first": seq in acked | nacked,
                }
            )
        elif f.name in ("ContentHeader", "ContentBody"):
            continue
        else:
            events.append(f.name)
            if "Close" in f.name:
                break
    return {"acked": sorted(acked), "nacked": sorted(nacked), "events": events}


@scenario("confirms")
def confirm_select_ok(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.confirm_delivery())


@scenario("confirms")
def confirms_cover_all_sequence_numbers(url: str) -> Any:
    with Scope(url) as s, RawConnection(url) as c:
        q = s.queue("q")
        c.handshake()
        c.open_channel(1)
        c.rpc(1, C.Queue.Declare(queue=q))
        c.rpc(1, C.Confirm.Select())
        for i in range(50):
            c.publish(1, "", q, b"%d" % i)
        return _confirm_events(c, 50)


@scenario("confirms")
def confirms_for_unroutable(url: str) -> Any:
    with Scope(url) as s, RawConnection(url) as c:
        c.handshake()
        c.open_channel(1)
        c.rpc(1, C.Confirm.Select())
        for _i in range(3):
            c.publish(1, "amq.direct", s.name("nowhere"), b"x")
        return _confirm_events(c, 3)


@scenario("confirms")
def mandatory_return_before_confirm(url: str) -> Any:
    with Scope(url) as s, RawConnection(url) as c:
        q = s.queue("q")
        c.handshake()
        c.open_channel(1)
        c.rpc(1, C.Queue.Declare(queue=q))
        c.rpc(1, C.Confirm.Select())
        c.publish(1, "", q, b"ok", mandatory=True)
        c.publish(1, "", "nowhere-" + s.token, b"returned", mandatory=True)
        c.publish(1, "", q, b"ok", mandatory=True)
        return _confirm_events(c, 3, return_seqs=(2,))


@scenario("confirms")
def confirm_select_nowait(url: str) -> Any:
    with Scope(url) as s, RawConnection(url) as c:
        q = s.queue("q")
        c.handshake()
        c.open_channel(1)
        c.rpc(1, C.Queue.Declare(queue=q))
        c.send(1, C.Confirm.Select(nowait=True))
        c.publish(1, "", q, b"1")
        return _confirm_events(c, 1)


@scenario("confirms")
def confirms_to_multiple_queues(url: str) -> Any:
    with Scope(url) as s, RawConnection(url) as c:
        x = s.exchange("f")
        c.handshake()
        c.open_channel(1)
        c.rpc(1, C.Exchange.Declare(exchange=x, exchange_type="fanout"))
        for i in range(3):
            q = s.queue(f"q{i}")
            c.rpc(1, C.Queue.Declare(queue=q, durable=True))
            c.rpc(1, C.Queue.Bind(queue=q, exchange=x))
        c.rpc(1, C.Confirm.Select())
        props = bytes.fromhex("1000") + b"\x02"  # delivery_mode=2
        for i in range(10):
            c.publish(1, x, "", b"p%d" % i, props_raw=props)
        return _confirm_events(c, 10)


@scenario("confirms")
def pika_blocking_confirm_unroutable_mandatory(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()
        try:
            ch.basic_publish("amq.direct", s.name("nowhere"), b"x", mandatory=True)
            return {"published": True}
        except pika.exceptions.UnroutableError as e:
            return {"unroutable": [(m.method.reply_code, m.method.reply_text) for m in e.messages]}


@scenario("confirms")
def confirm_after_publish_to_missing_exchange(url: str) -> Any:
    with Scope(url) as s, RawConnection(url) as c:
        c.handshake()
        c.open_channel(1)
        c.rpc(1, C.Confirm.Select())
        c.publish(1, s.name("missing"), "k", b"x")
        return until_close(c)


# --- mandatory returns (no confirms) --------------------------------------------------------------


@scenario("returns")
def mandatory_unroutable_312(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        x = s.exchange("d")
        ch.exchange_declare(x, "direct")
        returned: list[Any] = []
        ch.add_on_return_callback(
            lambda c, m, p, b: returned.append(
                {"method": pt.summarize(type("F", (), {"method": m})()), "props": pt.props_obs(p), "body": b.decode()}
            )
        )
        props = pika.BasicProperties(
            content_type="text/plain", headers={"h": 1}, message_id="mid", delivery_mode=2, priority=3
        )
        ch.basic_publish(x, "nowhere", b"back to you", props, mandatory=True)
        pt.pump(conn, 0.3)
        return returned


@scenario("returns")
def non_mandatory_unroutable_dropped(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        returned: list[Any] = []
        ch.add_on_return_callback(lambda c, m, p, b: returned.append(b))
        ch.basic_publish("amq.direct", s.name("nowhere"), b"x")
        pt.pump(conn, 0.2)
        return {"returned": len(returned)}


@scenario("returns")
def mandatory_routable_not_returned(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        returned: list[Any] = []
        ch.add_on_return_callback(lambda c, m, p, b: returned.append(b))
        ch.basic_publish("", q, b"x", mandatory=True)
        pt.pump(conn, 0.2)
        return {"returned": len(returned), "queued": pt.bodies(ch, q)}


@scenario("returns")
def mandatory_return_large_body(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        returned: list[Any] = []
        ch.add_on_return_callback(lambda c, m, p, b: returned.append(pt.body_obs(b)))
        body = bytes(range(256)) * 1200  # 300 KiB: the return is split over frames too
        ch.basic_publish("amq.direct", s.name("nowhere"), body, mandatory=True)
        pt.pump(conn, 0.5)
        return returned


@scenario("returns")
def immediate_flag_540(url: str) -> Any:
    with Scope(url) as s, RawConnection(url) as c:
        q = s.queue("q")
        c.handshake()
        c.open_channel(1)
        c.rpc(1, C.Queue.Declare(queue=q))
        c.publish(1, "", q, b"x", immediate=True)
        return until_close(c)


# --- transactions ---------------------------------------------------------------------------------


@scenario("tx")
def commit_publishes(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.tx_select()
        ch.basic_publish("", q, b"a")
        ch.basic_publish("", q, b"b")
        before = pt.summarize(conn.channel().queue_declare(q, passive=True))
        ch.tx_commit()
        return {"before_commit": before, "after_commit": pt.bodies(conn.channel(), q)}


@scenario("tx")
def rollback_publishes(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.tx_select()
        ch.basic_publish("", q, b"a")
        ch.tx_rollback()
        ch.basic_publish("", q, b"b")
        ch.tx_commit()
        return pt.bodies(conn.channel(), q)


@scenario("tx")
def commit_acks(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        for i in range(3):
            ch.basic_publish("", q, b"%d" % i)
        ch.tx_select()
        tags = [ch.basic_get(q)[0].delivery_tag for _ in range(3)]
        ch.basic_ack(tags[1])
        ch.tx_commit()
        ch.close()
        return pt.get_all(conn.channel(), q)


@scenario("tx")
def rollback_acks_keeps_unacked(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        for i in range(2):
            ch.basic_publish("", q, b"%d" % i)
        ch.tx_select()
        tags = [ch.basic_get(q)[0].delivery_tag for _ in range(2)]
        ch.basic_ack(tags[0])
        ch.tx_rollback()
        ch.close()
        return pt.get_all(conn.channel(), q)


@scenario("tx")
def rollback_nack(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        ch.basic_publish("", q, b"x")
        ch.tx_select()
        m, _, _ = ch.basic_get(q)
        ch.basic_nack(m.delivery_tag, requeue=True)
        ch.tx_rollback()
        held = pt.summarize(conn.channel().queue_declare(q, passive=True))
        ch.close()
        return {"during": held, "after_close": pt.get_all(conn.channel(), q)}


@scenario("tx")
def commit_without_select_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.tx_commit())


@scenario("tx")
def rollback_without_select_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        return pt.expect_close(lambda: ch.tx_rollback())


@scenario("tx")
def tx_select_on_confirm_channel_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.confirm_delivery()
        return pt.expect_close(lambda: ch.tx_select())


@scenario("tx")
def confirm_select_on_tx_channel_406(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.tx_select()
        return pt.expect_close(lambda: ch.confirm_delivery())


@scenario("tx")
def tx_select_twice_ok(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.tx_select()
        return pt.expect_close(lambda: ch.tx_select())


@scenario("tx")
def tx_mandatory_return_on_commit(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        returned: list[Any] = []
        ch.add_on_return_callback(lambda c, m, p, b: returned.append(m.reply_code))
        ch.tx_select()
        ch.basic_publish("amq.direct", s.name("nowhere"), b"x", mandatory=True)
        ch.tx_commit()
        pt.pump(conn, 0.2)
        return returned


@scenario("tx")
def empty_commit_ok(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        ch.tx_select()
        return [pt.summarize(ch.tx_commit()), pt.summarize(ch.tx_rollback())]
