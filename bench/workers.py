"""Load-generator processes: one AMQP connection each, pre-encoded publish batches and a struct scanner.

The parent drives all workers through one shared int64 array (no locks on the hot path): ctl[0] is the
phase, and each worker owns a few slots it overwrites with its running totals. Latency samples and errors
travel back once, at the end, through a multiprocessing queue.
"""

from __future__ import annotations

import os
import select
import socket
import time
import traceback
from dataclasses import dataclass
from multiprocessing.queues import Queue
from typing import Any

from pamqp import commands

from bench.codec import (
    AppPublish,
    ConfirmTracker,
    FrameScanner,
    ScanResult,
    StampedPublish,
    basic_ack,
    publish_frames,
)
from bench.wire import RawConnection

# Phases written by the parent into ctl[0]
WAIT, RUN, MEASURE, STOP = 0, 1, 2, 3
# Per-worker slots: messages sent (publisher) or received (consumer), confirmed, ns spent inside
# sendall/recv (blocked on the broker), state, socket reads (consumer), own CPU µs (user+system)
SLOT_COUNT, SLOT_CONFIRMED, SLOT_IO_NS, SLOT_STATE, SLOT_SYSCALLS, SLOT_CPU_US = 0, 1, 2, 3, 4, 5
SLOTS = 6
STATE_STARTING, STATE_READY, STATE_DONE, STATE_FAILED = 0, 1, 2, 3
SOCKET_TIMEOUT = 0.2  # how often a blocked worker rechecks the phase
STALL_LIMIT = 10.0  # a sendall blocked this long means the broker stopped reading: give up
RCVLOWAT = 64 * 1024


@dataclass(frozen=True)
class PublisherSpec:
    url: str
    exchange: str
    routing_keys: tuple[str, ...]
    body_size: int = 100
    persistent: bool = False
    confirm_window: int = 0  # 0: no confirms
    rate: float = 0.0  # msg/s; 0: as fast as the broker takes them
    limit: int = 0  # stop after this many messages (0: until STOP)
    batch: int = 100  # messages per sendall when unthrottled
    # Each message with its own message_id, correlation_id, timestamp, content_type and header, as applications
    # publish (codec.AppPublish); False: the same property bytes on every message.
    app_properties: bool = True


@dataclass(frozen=True)
class ConsumerSpec:
    url: str
    queue: str
    no_ack: bool = True
    prefetch: int = 0
    ack_every: int = 10
    want_stamps: bool = False
    limit: int = 0  # stop after this many deliveries (0: until STOP)
    body_size: int = 100  # expected; sizes the read batching so it never exceeds a quarter of prefetch
    stream_offset: str | None = None  # x-stream-offset, for a stream consumer

    @property
    def rcvlowat(self) -> int:
        if self.want_stamps:
            return 0  # latency runs read every message as soon as it lands
        if self.no_ack or not self.prefetch:
            return RCVLOWAT
        # Frame overhead of a delivery is ~100 bytes (three frame headers, tags, exchange, routing key).
        return min(RCVLOWAT, self.prefetch * (self.body_size + 100) // 4)


Spec = PublisherSpec | ConsumerSpec


def run_worker(spec: Spec, ctl: Any, slot: int, results: Queue[dict[str, Any]]) -> None:
    """Process entry point: never raises, reports failures through `results` and the state slot."""
    stats = Stats(ctl, slot)
    report: dict[str, Any] = {"slot": slot, "pid": os.getpid(), "latencies": [], "error": None}
    try:
        worker = Publisher(spec, stats) if isinstance(spec, PublisherSpec) else Consumer(spec, stats)
        report["latencies"] = worker.run()
        stats.cpu()
        stats.set(SLOT_STATE, STATE_DONE)
    except Exception as exc:  # any failure must reach the parent's report, not just this process's stderr
        report["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
        stats.set(SLOT_STATE, STATE_FAILED)
    results.put(report)


class Stats:
    """This worker's view of the shared array."""

    def __init__(self, ctl: Any, slot: int) -> None:
        self.ctl = ctl
        self.base = 1 + slot * SLOTS

    def phase(self) -> int:
        return int(self.ctl[0])

    def set(self, field: int, value: int) -> None:
        self.ctl[self.base + field] = value

    def cpu(self) -> None:
        """Own CPU time, published with the counters: it stays readable after this process has exited
        (S4's workers finish before the parent's last snapshot), unlike /proc/<pid>/stat."""
        t = os.times()
        self.set(SLOT_CPU_US, int((t.user + t.system) * 1e6))

    def wait_for_start(self) -> None:
        self.cpu()
        self.set(SLOT_STATE, STATE_READY)
        while self.ctl[0] == WAIT:
            time.sleep(0.005)


class Publisher:
    def __init__(self, spec: PublisherSpec, stats: Stats) -> None:
        self.spec = spec
        self.stats = stats
        self.conn = RawConnection(spec.url).connect()
        if spec.confirm_window:
            self.conn.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
        self.sock: socket.socket = self.conn.sock  # type: ignore[assignment]
        self.frames = [self._message(k) for k in spec.routing_keys]
        self.app = (
            AppPublish(
                1,
                spec.exchange,
                spec.routing_keys,
                spec.body_size,
                self.conn.frame_max,
                2 if spec.persistent else None,
                f"{os.getpid():x}",
            )
            if spec.app_properties
            else None
        )
        self.readable = select.poll()
        self.readable.register(self.sock, select.POLLIN)
        self.scanner = FrameScanner()
        self.tracker = ConfirmTracker()
        self.latencies: list[tuple[int, int]] = []
        self.io_ns = 0

    def run(self) -> list[tuple[int, int]]:
        self.stats.wait_for_start()
        self.sock.settimeout(STALL_LIMIT)
        try:
            if self.spec.rate:
                self._paced()
            elif self.spec.confirm_window:
                self._confirmed()
            else:
                self._flat_out()
        finally:
            self.conn.close(wait=False)
        return self.latencies

    def _message(self, routing_key: str) -> bytes:
        s = self.spec
        return publish_frames(
            1, s.exchange, routing_key, bytes(s.body_size), self.conn.frame_max, 2 if s.persistent else None
        )

    def _batch(self, count: int) -> bytes:
        # Routing keys cycle inside the batch so a topic exchange sees all of them in equal measure.
        if self.app is not None:
            return self.app.batch(count, int(time.time()))
        frames = self.frames
        if len(frames) == 1:
            return frames[0] * count
        return b"".join(frames[i % len(frames)] for i in range(count))

    def _send(self, data: bytes) -> None:
        t0 = time.perf_counter_ns()
        self.sock.sendall(data)
        self.io_ns += time.perf_counter_ns() - t0

    def _publish_totals(self) -> None:
        self.stats.set(SLOT_COUNT, self.tracker.published)
        self.stats.set(SLOT_CONFIRMED, self.tracker.confirmed)
        self.stats.set(SLOT_IO_NS, self.io_ns)
        self.stats.cpu()

    def _flat_out(self) -> None:
        """No confirms: write the same pre-built batch until told to stop; the broker's TCP window and its
        flow control are the only brakes, which is what makes this a saturation test."""
        batch_size = self.spec.batch
        batch = self._batch(batch_size)
        limit = self.spec.limit or 1 << 62
        while self.stats.phase() != STOP and self.tracker.published < limit:
            if self.app is not None:
                batch = self._batch(batch_size)  # new ids every time; equal properties reuse one batch
            self._send(batch)
            self.tracker.published += batch_size
            self._poll_broker()
            self._publish_totals()

    def _poll_broker(self) -> None:
        """Non-blocking read so that a channel.close or connection.blocked is reported, not ignored."""
        # poll(0), not MSG_DONTWAIT: a socket with a timeout waits for readability before any recv
        if not self.readable.poll(0):
            return
        n = self.sock.recv_into(self.scanner.free())
        if not n:
            raise ConnectionError("broker closed the publisher's connection")
        self.scanner.commit(n)

    def _confirmed(self) -> None:
        """At most confirm_window unconfirmed messages; refill in chunks of a quarter window so one write
        carries many messages while the window stays nearly full."""
        window = self.spec.confirm_window
        chunk = max(1, window // 4)
        limit = self.spec.limit or 1 << 62
        tracker = self.tracker
        while self.stats.phase() != STOP:
            room = min(window - tracker.outstanding, limit - tracker.published)
            if room >= chunk or (room > 0 and tracker.published + room == limit):
                self._send(self._batch(room))
                tracker.sent(room, time.monotonic_ns())
            elif tracker.published >= limit and tracker.outstanding == 0:
                break
            else:
                self._await_confirms()
            self._publish_totals()

    def _await_confirms(self) -> None:
        self.sock.settimeout(SOCKET_TIMEOUT)
        t0 = time.perf_counter_ns()
        try:
            n = self.sock.recv_into(self.scanner.free())
        except TimeoutError:
            return
        finally:
            self.io_ns += time.perf_counter_ns() - t0
            self.sock.settimeout(STALL_LIMIT)
        if not n:
            raise ConnectionError("broker closed the publisher's connection")
        found = self.scanner.commit(n)
        now = time.monotonic_ns()
        keep = self.stats.phase() == MEASURE
        for tag, multiple in found.acks:
            done = self.tracker.on_confirm(tag, multiple, now)
            if keep:
                self.latencies.extend(done)
        for tag, multiple in found.nacks:
            self.tracker.on_confirm(tag, multiple, now, nack=True)

    def _paced(self) -> None:
        """Fixed rate (S5): each message carries its send time; messages that fell due while we slept go out
        together, capped so a stall does not turn into a burst."""
        tpl = StampedPublish(1, self.spec.exchange, self.spec.routing_keys[0], self.spec.body_size)
        interval = 1e9 / self.spec.rate
        start = time.monotonic_ns()
        sent = 0
        while self.stats.phase() != STOP:
            now = time.monotonic_ns()
            due = min(int((now - start) / interval) + 1 - sent, 50)
            if due > 0:
                if self.app is not None:
                    self._send(self.app.batch(due, int(time.time()), stamp_ns=now))
                else:
                    self._send(b"".join(tpl.encode(now) for _ in range(due)))
                sent += due
                self.tracker.published = sent
                self._poll_broker()
                self._publish_totals()
            wait_s = (start + (sent + 1) * interval - time.monotonic_ns()) / 1e9
            if wait_s > 0:
                time.sleep(wait_s)


class Consumer:
    def __init__(self, spec: ConsumerSpec, stats: Stats) -> None:
        self.spec = spec
        self.stats = stats
        self.conn = RawConnection(spec.url).connect()
        if not spec.no_ack and spec.prefetch:
            self.conn.rpc(1, commands.Basic.Qos(prefetch_count=spec.prefetch), commands.Basic.QosOk)
        self.sock: socket.socket = self.conn.sock  # type: ignore[assignment]
        self.scanner = FrameScanner(want_stamps=spec.want_stamps)
        self.count = 0
        self.since_ack = 0
        self.reads = 0
        self.last_tag = 0
        self.io_ns = 0
        self.latencies: list[tuple[int, int]] = []

    def run(self) -> list[tuple[int, int]]:
        self.stats.wait_for_start()
        self.conn.rpc(
            1,
            commands.Basic.Consume(queue=self.spec.queue, no_ack=self.spec.no_ack, arguments=self._arguments()),
            commands.Basic.ConsumeOk,
        )
        self.sock.settimeout(SOCKET_TIMEOUT)
        if self.spec.rcvlowat:
            # Throughput runs: wake up once per RCVLOWAT bytes instead of once per few messages. Per-read
            # overhead (syscall, TCP window updates, Python) otherwise dominates the consumer's CPU.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, self.spec.rcvlowat)
        try:
            self._handle(self.scanner.feed(self.conn.take_buffered()))
            self._loop()
            self._ack_pending()
        finally:
            self.conn.close(wait=False)
        return self.latencies

    def _arguments(self) -> dict[str, Any] | None:
        offset = self.spec.stream_offset
        return {"x-stream-offset": offset} if offset is not None else None

    def _loop(self) -> None:
        limit = self.spec.limit or 1 << 62
        scanner, sock = self.scanner, self.sock
        while self.stats.phase() != STOP and self.count < limit:
            t0 = time.perf_counter_ns()
            n: int | None
            try:
                n = sock.recv_into(scanner.free())
            except TimeoutError:
                n = self._recv_below_lowat()
                if n is None:
                    self._ack_pending()  # idle: don't leave a partial ack interval holding prefetch slots
                    continue
            finally:
                self.io_ns += time.perf_counter_ns() - t0
            if not n:
                raise ConnectionError("broker closed the consumer's connection")
            self._handle(scanner.commit(n))
            self.reads += 1
            self.stats.set(SLOT_COUNT, self.count)
            self.stats.set(SLOT_IO_NS, self.io_ns)
            self.stats.set(SLOT_SYSCALLS, self.reads)
            self.stats.cpu()

    def _recv_below_lowat(self) -> int | None:
        """After a timeout, take whatever is buffered even if under RCVLOWAT (the tail of a run).
        None: nothing there; 0: the broker closed the connection."""
        self.sock.setblocking(False)
        try:
            return self.sock.recv_into(self.scanner.free())
        except BlockingIOError:
            return None
        finally:
            self.sock.settimeout(SOCKET_TIMEOUT)

    def _handle(self, found: ScanResult) -> None:
        tags = found.delivery_tags
        if not tags:
            return
        self.count += len(tags)
        if found.stamps and self.stats.phase() == MEASURE:
            now = time.monotonic_ns()
            self.latencies.extend((now - s, 1) for s in found.stamps)
        if not self.spec.no_ack:
            self._ack(tags)

    def _ack(self, tags: list[int]) -> None:
        """A multiple-ack at every ack_every-th delivery; all acks due from one read leave in one write."""
        every = self.spec.ack_every
        first = every - 1 - self.since_ack
        acks = [basic_ack(1, tags[i], True) for i in range(first, len(tags), every)]
        self.since_ack = (self.since_ack + len(tags)) % every
        self.last_tag = tags[-1]
        if acks:
            self.sock.sendall(b"".join(acks))

    def _ack_pending(self) -> None:
        if self.since_ack and not self.spec.no_ack:
            self.sock.sendall(basic_ack(1, self.last_tag, True))
            self.since_ack = 0
