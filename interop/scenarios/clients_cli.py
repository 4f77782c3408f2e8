"""Debian's amqp-tools (librabbitmq): amqp-declare-queue, amqp-publish, amqp-get, amqp-consume,
amqp-delete-queue — observed through their stdout, stderr code names and exit status."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from typing import Any

from interop import pika_tools as pt
from interop.registry import scenario
from interop.scope import Scope, pika_session

CODE_NAMES = re.compile(
    r"\b(NOT_FOUND|ACCESS_REFUSED|RESOURCE_LOCKED|PRECONDITION_FAILED|NOT_ALLOWED|"
    r"COMMAND_INVALID|NOT_IMPLEMENTED|CHANNEL_ERROR|FRAME_ERROR|UNEXPECTED_FRAME)\b"
)


def tool(name: str, url: str, *args: str, stdin: bytes | None = None, timeout: float = 10) -> dict[str, Any]:
    exe = shutil.which(name)
    if exe is None:
        raise RuntimeError(f"{name} is not installed (Debian package amqp-tools)")
    p = subprocess.run([exe, "--url", url, *args], input=stdin, capture_output=True, timeout=timeout)
    return {
        "rc": p.returncode,
        "out": p.stdout.decode(errors="replace"),
        "errors": sorted(set(CODE_NAMES.findall(p.stderr.decode(errors="replace")))),
    }


@scenario("client-cli")
def declare_publish_get_delete(url: str) -> Any:
    with Scope(url) as s:
        q = s.queue("q")
        out = {"declare": tool("amqp-declare-queue", url, "-q", q)}
        for body in ("first", "second"):
            out[f"publish_{body}"] = tool("amqp-publish", url, "-r", q, "-b", body)
        out["get"] = tool("amqp-get", url, "-q", q)
        out["delete"] = tool("amqp-delete-queue", url, "-q", q)
        return out


@scenario("client-cli")
def get_from_empty_queue(url: str) -> Any:
    with Scope(url) as s:
        q = s.queue("q")
        tool("amqp-declare-queue", url, "-q", q)
        return tool("amqp-get", url, "-q", q)


@scenario("client-cli")
def get_from_missing_queue(url: str) -> Any:
    with Scope(url) as s:
        return tool("amqp-get", url, "-q", s.name("missing"))


@scenario("client-cli")
def declare_durable_then_mismatch(url: str) -> Any:
    with Scope(url) as s:
        q = s.queue("q")
        return {
            "durable": tool("amqp-declare-queue", url, "-d", "-q", q),
            "non_durable": tool("amqp-declare-queue", url, "-q", q),
        }


@scenario("client-cli")
def server_named_queue_declare(url: str) -> Any:
    r = tool("amqp-declare-queue", url, "-q", "")  # a server-named, non-exclusive queue: delete it afterwards
    with Scope(url) as s:
        s.track_queue(r["out"].strip())
        return r


@scenario("client-cli")
def publish_with_properties_and_headers(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        r = tool(
            "amqp-publish",
            url,
            "-r",
            q,
            "-p",
            "-C",
            "application/json",
            "-E",
            "utf-8",
            "-t",
            "reply.here",
            "-H",
            "x-one: 1",
            "-H",
            "tenant: acme",
            "-b",
            '{"a":1}',
        )
        return {"publish": r, "got": pt.get_all(ch, q, with_props=True)}


@scenario("client-cli")
def publish_line_buffered(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        r = tool("amqp-publish", url, "-r", q, "-l", stdin=b"one\ntwo\nthree\n")
        return {"publish": r, "got": pt.bodies(ch, q)}


@scenario("client-cli")
def publish_to_missing_exchange(url: str) -> Any:
    with Scope(url) as s:
        return tool("amqp-publish", url, "-e", s.name("missing"), "-r", "k", "-b", "x")


@scenario("client-cli")
def consume_count_with_prefetch(url: str) -> Any:
    with pika_session(url) as (s, conn, ch):
        q = s.queue("q")
        ch.queue_declare(q)
        for i in range(4):
            ch.basic_publish("", q, b"c%d;" % i)
        r = tool("amqp-consume", url, "-q", q, "-c", "3", "-p", "1", "cat")
        pt.pump(conn, 0.1)
        return {"consume": r, "left": pt.bodies(ch, q)}


@scenario("client-cli")
def consume_exclusive_bound_queue(url: str) -> Any:
    """amqp-consume declares a server-named exclusive queue bound to our exchange; publish once it's up."""
    with pika_session(url) as (s, conn, ch):
        x = s.exchange("x")
        ch.exchange_declare(x, "direct")
        result: dict[str, Any] = {}

        def run() -> None:
            result.update(tool("amqp-consume", url, "-e", x, "-r", "rk", "-x", "-c", "2", "cat", timeout=8))

        t = threading.Thread(target=run, daemon=True)
        t.start()
        deadline = time.monotonic() + 5
        published = 0
        returned: list[Any] = []
        ch.add_on_return_callback(lambda c, m, p, b: returned.append(b))
        while t.is_alive() and time.monotonic() < deadline and published < 2:
            # publish mandatory and retry on return: the consumer's queue may not be bound yet
            returned.clear()
            ch.basic_publish(x, "rk", b"e%d;" % published, mandatory=True)
            pt.pump(conn, 0.1)
            if not returned:
                published += 1
        t.join(8)
        return result


@scenario("client-cli")
def consume_from_missing_queue(url: str) -> Any:
    with Scope(url) as s:
        return tool("amqp-consume", url, "-q", s.name("missing"), "-c", "1", "cat")


@scenario("client-cli")
def bad_credentials(url: str) -> Any:
    bad = url.replace("guest:guest@", "guest:wrong@", 1)
    return tool("amqp-get", bad, "-q", "whatever")
