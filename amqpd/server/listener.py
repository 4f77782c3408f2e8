"""Start the broker: open the store, listen, serve until SIGTERM/SIGINT, then close connections
with 320 CONNECTION_FORCED and exit."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import gc
import logging
import os
import resource
import signal
import sqlite3
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import IO, Any, Protocol, TypeVar

from amqpd import __version__, logs, runtime_file
from amqpd.broker.broker import Broker
from amqpd.broker.parameters import ParameterError
from amqpd.broker.streams.args import is_stream
from amqpd.config import Settings
from amqpd.server.alarms import Alarms
from amqpd.server.connection import AMQPServerProtocol
from amqpd.server.fd_budget import FdBudget, raise_to_hard_limit
from amqpd.server.heartbeats import HeartbeatSweep
from amqpd.server.load import sample_load
from amqpd.server.malloc_tuning import tune_malloc
from amqpd.shovel.supervisor import Shovels
from amqpd.tls import TLSConfigError, reload_context, server_context, tls_enabled

log = logging.getLogger("amqpd")
T = TypeVar("T")
# The cyclic GC's thresholds while serving. Python's default (700 allocations) runs a young collection every
# ~100 deliveries and a full one over every live delivery and message every ~70,000: a stream replay with
# 20,000 deliveries in flight spent a fifth of its CPU there. The broker's per-message objects are acyclic
# (freed by reference counting), so collecting rarely costs no memory.
GC_THRESHOLDS = (50_000, 20, 10)


class Embedding:
    """serve() inside another program's thread (amqpd.testing.EmbeddedBroker): no signal handlers and no change
    to the process's garbage collector (they belong to the host program); the listening addresses are handed
    over through `started` instead of printed, and `stop()` may be called from any thread.

    `defer_management`: the management and metrics listeners start on the first `start_management()` instead of
    before the broker is announced, so that a host that may never need them does not wait for them (importing
    the HTTP server is most of what they cost). `call(fn)` runs `fn(broker)` on the broker's event loop, from
    any thread, and returns what it returns: the host's way to the broker's public methods without a socket."""

    def __init__(self, defer_management: bool = False) -> None:
        self.started = threading.Event()
        self.addresses: dict[str, tuple[str, int]] = {}  # "amqp", "amqps", "management", "prometheus"
        self.defer_management = defer_management
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._broker: Broker | None = None
        self._management: DeferredManagement | None = None

    def announce(self, kind: str, sockname: tuple[Any, ...]) -> None:
        self.addresses.setdefault(kind, (sockname[0], sockname[1]))  # the first address of each kind

    async def wait(self, broker: Broker, management: DeferredManagement | None) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._broker, self._management = broker, management
        if self._stop_requested:
            self._stop.set()
        self.started.set()
        await self._stop.wait()

    def call(self, fn: Callable[[Broker], T], timeout: float = 30.0) -> T:
        """fn(broker) on the broker's loop; its exception is raised here. RuntimeError if the broker is not up."""
        loop, broker = self._loop, self._broker
        if loop is None or broker is None or self._stop_requested:
            raise RuntimeError("the embedded broker is not running")

        async def run() -> T:
            return fn(broker)

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout)

    def start_management(self, timeout: float = 30.0) -> None:
        """Start the deferred management and metrics listeners, if not yet started; returns once they listen
        (their addresses are then in `addresses`)."""
        if self._stop_requested:
            raise RuntimeError("the embedded broker is stopping")
        if self._loop is None or self._management is None:
            return
        asyncio.run_coroutine_threadsafe(self._management.start(), self._loop).result(timeout)

    def stop(self) -> None:
        self._stop_requested = True
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)


class Management(Protocol):
    """The management side's running services (amqpd/mgmt/service.py), as the listener drives them."""

    @property
    def listeners(self) -> list[tuple[str, Any]]: ...

    async def sample_rates(self) -> None: ...

    def reload_tls(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True)
class Services:
    """What runs beside the AMQP listener, given by a composition root (cli.py, amqpd.testing), so that server
    never imports mgmt (which stands beside it, on the broker): the management API and the definitions loader.
    start_management(broker, settings, the AMQP listeners as (protocol, host, port), the embedding or None)."""

    start_management: Callable[[Broker, Settings, list[tuple[str, str, int]], Any], Awaitable[Management | None]]
    load_definitions: Callable[[Broker, str], bool]


class DeferredManagement:
    """The management side of an embedded broker started on demand (Embedding.start_management): until then
    nothing of it is imported or listening; it then runs as if started with the broker. Made on the broker's
    loop, as its lock and event are."""

    def __init__(self, start: Callable[[], Awaitable[Management | None]]) -> None:
        self._start = start
        self._management: Management | None = None
        self._started = asyncio.Event()
        self._lock = asyncio.Lock()  # a start and a stop, or two starts, one after the other
        self._stopped = False

    @property
    def listeners(self) -> list[tuple[str, Any]]:
        return self._management.listeners if self._management is not None else []

    async def start(self) -> None:
        async with self._lock:
            if not self._started.is_set() and not self._stopped:
                self._management = await self._start()
                self._started.set()

    async def sample_rates(self) -> None:
        await self._started.wait()
        if self._management is not None:
            await self._management.sample_rates()

    def reload_tls(self) -> None:
        if self._management is not None:
            self._management.reload_tls()

    async def stop(self) -> None:
        async with self._lock:
            self._stopped = True
            if self._management is not None:
                await self._management.stop()


async def serve(settings: Settings, services: Services, embedding: Embedding | None = None) -> None:
    loop = asyncio.get_running_loop()
    lock = _lock_data_dir(settings)  # held until the broker stops
    crashed = _take_clean_marker(settings)
    # Recovery builds hundreds of thousands of acyclic objects: the cyclic GC would rescan the growing heap
    # again and again (it doubled recovery time). Collect once at the end and freeze them out of later scans.
    if embedding is None:
        gc.disable()
    started = time.monotonic()
    try:
        store, recovered = await _open_store(settings)
        broker = Broker(settings, store=store, scheduler=loop.call_later)
        if store is not None:
            from amqpd.broker.recovery import restore

            queues, messages = restore(broker, recovered, crashed)
            del recovered
            after = "a crash" if crashed else "a clean stop"
            log.info(
                "recovered %d queues and %d messages in %.2f s (after %s) from %s",
                queues,
                messages,
                time.monotonic() - started,
                after,
                settings.data_dir,
            )
        else:
            log.info("in memory: nothing is kept on disk")
    finally:
        if embedding is None:
            gc.enable()
            gc.collect()
            gc.freeze()
            gc.set_threshold(*GC_THRESHOLDS)
    shovels = Shovels(broker.parameters)  # before definitions: they may hold shovels
    if not _add_static_shovels(shovels, settings):
        if store is not None:
            await store.close()
        raise SystemExit(1)
    if settings.load_definitions and not services.load_definitions(broker, settings.load_definitions):
        if store is not None:
            await store.close()
        raise SystemExit(1)
    registry: set[AMQPServerProtocol] = set()
    if embedding is None:  # an embedding process owns its limits, and its malloc
        _raise_fd_limit()
        tune_malloc(settings.malloc_mmap_threshold, settings.malloc_trim_threshold)
    fd_budget = FdBudget()
    heartbeats = HeartbeatSweep(time.monotonic, loop.call_later)  # every connection's timers, one loop timer
    try:
        servers = await _listen(
            loop, lambda: AMQPServerProtocol(broker, registry, fd_budget, heartbeats), settings.host, settings.port
        )
    except OSError as exc:  # the port is taken, or the address is not ours: say so plainly and exit 1
        log.error("cannot listen on %s: %s", getattr(exc, "address", settings.port), exc.strerror or exc)
        if store is not None:
            await store.close()
        raise SystemExit(1) from None
    tls = await _start_tls_listener(settings, broker, registry, store, embedding, fd_budget, heartbeats)
    amqp = _addresses("amqp", servers) + _addresses("amqp/ssl", tls)
    management: Management | None
    deferred = None
    if embedding is not None and embedding.defer_management:
        deferred = management = DeferredManagement(
            partial(services.start_management, broker, settings, amqp, embedding)
        )
    else:
        management = await services.start_management(broker, settings, amqp, embedding)
    shovels.start(runtime_file.url("amqp", *servers[0].sockets[0].getsockname()[:2]), broker.access)
    # asyncio's own task group and loop runner, not anyio's: importing anyio's asyncio backend was a large part
    # of the CPU time a broker took to listen, and nothing here needs more than asyncio gives
    async with asyncio.TaskGroup() as tg:
        background = [tg.create_task(store.run())] if store is not None else []
        background += [tg.create_task(Alarms(broker, settings).run()), tg.create_task(sample_load(broker))]
        if management is not None:
            background.append(tg.create_task(management.sample_rates()))
        if embedding is not None:
            if settings.data_dir:
                runtime_file.write(settings.data_dir, _runtime_info(servers, tls, management))
            for server in servers:
                for sock in server.sockets:
                    embedding.announce("amqp", sock.getsockname())
            await embedding.wait(broker, deferred)
        else:
            await _serve_until_signal(settings, servers, tls, management)
        await shovels.stop()
        for server in servers:
            server.close()
        if management is not None:
            await management.stop()
        if tls is not None:
            for server in tls[0]:
                server.close()
        for proto in list(registry):
            proto.shutdown()
        await _wait_closed(registry)
        if store is not None:
            await _close_store(broker, store, settings)
        if settings.data_dir:
            runtime_file.remove(settings.data_dir)
        if lock is not None:
            lock.close()
        for task in background:
            task.cancel()


async def _serve_until_signal(settings: Settings, servers: list[Any], tls: Any, management: Any) -> None:
    """Until SIGTERM or SIGINT; SIGHUP reloads the TLS certificates, SIGUSR1 reopens the log file."""
    signums = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
    signals: asyncio.Queue[int] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    for handled in signums:  # before the lines that tell we are up
        loop.add_signal_handler(handled, signals.put_nowait, handled)
    try:
        if settings.data_dir:  # before the lines: whoever has read them finds the file
            runtime_file.write(settings.data_dir, _runtime_info(servers, tls, management))
        for server in servers:
            for sock in server.sockets:
                # amqpd.testing and scripts read these lines on stdout; a log file gets them too
                logs.announce(f"amqpd listening on {_address(sock.getsockname())}")
        while True:
            signum = await signals.get()
            if signum == signal.SIGUSR1:  # logrotate moved the log file away: write to a new one
                logs.reopen()
                log.info("log file reopened (SIGUSR1)")
                continue
            if signum == signal.SIGHUP:
                if tls is not None:
                    reload_context(tls[1], settings)
                if management is not None:
                    management.reload_tls()
                continue
            log.info("received %s, shutting down", signal.Signals(signum).name)
            return
    finally:
        for handled in signums:
            loop.remove_signal_handler(handled)


def _raise_fd_limit() -> None:
    """Every connection holds a file descriptor: take all the system allows, and say how many that is."""
    before, now = raise_to_hard_limit()

    def shown(n: int) -> str:
        return "unlimited" if n == resource.RLIM_INFINITY else str(n)

    if now != before:
        log.info("file descriptors: ulimit -n raised from %s to %s", shown(before), shown(now))
    else:
        log.info("file descriptors: ulimit -n %s", shown(now))


def _addresses(protocol: str, servers: Any) -> list[tuple[str, str, int]]:
    """(protocol, host, port) of every socket the servers listen on (a host each, IPv4 and IPv6 apart):
    the listeners /api/overview and `amqpctl status` show. `servers`: a list, (list, TLS context) or None."""
    if isinstance(servers, tuple):
        servers = servers[0]
    return [(protocol, *sock.getsockname()[:2]) for server in servers or () for sock in server.sockets]


async def _start_tls_listener(
    settings: Settings,
    broker: Broker,
    registry: set[AMQPServerProtocol],
    store: Any,
    embedding: Embedding | None = None,
    fd_budget: FdBudget | None = None,
    heartbeats: HeartbeatSweep | None = None,
) -> tuple[list[Any], ssl.SSLContext] | None:
    """The amqps listener, when a certificate is configured; its address is printed before the plain one
    (`amqpd TLS listening on HOST:PORT`). A bad TLS setting or a taken port stops the broker, as for AMQP."""
    if not tls_enabled(settings):
        return None
    loop = asyncio.get_running_loop()
    try:
        ctx = server_context(settings)
        servers = await _listen(
            loop,
            lambda: AMQPServerProtocol(broker, registry, fd_budget, heartbeats),
            settings.host,
            settings.tls_port,
            ssl=ctx,
            ssl_handshake_timeout=settings.handshake_timeout,
        )
    except (TLSConfigError, OSError) as exc:
        log.error("cannot listen for TLS on %s:%s: %s", settings.host, settings.tls_port, exc)
        if store is not None:
            await store.close()
        raise SystemExit(1) from None
    for server in servers:
        for sock in server.sockets:
            if embedding is not None:
                embedding.announce("amqps", sock.getsockname())
            else:
                logs.announce(f"amqpd TLS listening on {_address(sock.getsockname())}")
    return servers, ctx


def _runtime_info(servers: list[Any], tls: Any, management: Any) -> dict[str, Any]:
    """What amqpctl and other local tools need to find this broker (amqpd.runtime_file)."""
    host, port = servers[0].sockets[0].getsockname()[:2]
    info: dict[str, Any] = {"pid": os.getpid(), "version": __version__}
    info["amqp_url"] = runtime_file.url("amqp", host, port)
    if tls is not None:
        host, port = tls[0][0].sockets[0].getsockname()[:2]
        info["amqps_url"] = runtime_file.url("amqps", host, port)
    info["management_url"] = info["metrics_url"] = None
    for protocol, listener in management.listeners if management is not None else []:
        key = "metrics_url" if protocol.endswith("prometheus") else "management_url"
        if info[key] is None or not protocol.startswith("https"):  # with both, the plain HTTP one
            info[key] = runtime_file.url(protocol.split("/")[0], *listener.address)
    return info


async def _listen(
    loop: asyncio.AbstractEventLoop, factory: Any, hosts: list[str], port: int, **options: Any
) -> list[Any]:
    """One server per address, all on one port: with port 0 the first picks it and the others take the same.
    The IPv6 loopback of the default is skipped (with a warning) on a machine without IPv6."""
    servers: list[Any] = []
    try:
        for host in hosts:
            try:
                server = await loop.create_server(factory, host, port, reuse_address=True, backlog=1024, **options)
            except OSError as exc:
                if host == "::1" and servers and exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    log.warning("not listening on [::1]: %s (no IPv6 here)", exc.strerror or exc)
                    continue
                exc.address = f"{_address((host, port))}"  # type: ignore[attr-defined]
                raise
            servers.append(server)
            port = server.sockets[0].getsockname()[1]
    except OSError:
        for server in servers:
            server.close()
        raise
    return servers


def _address(sockname: tuple[Any, ...]) -> str:
    host, port = sockname[0], sockname[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _add_static_shovels(shovels: Shovels, settings: Settings) -> bool:
    """The config file's shovels; one whose keys RabbitMQ would refuse stops the broker, naming it."""
    for name, value in settings.shovels.items():
        try:
            shovels.add_static(name, value)
        except ParameterError as exc:
            log.error("shovel %s in the configuration: %s", name, exc)
            return False
    return True


async def _wait_closed(registry: set[Any], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while registry and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


CLEAN_MARKER = "clean-shutdown"


def _take_clean_marker(settings: Settings) -> bool:
    """True when the last run did not stop cleanly (a crash, kill -9, power loss): delivered-marks it had
    not yet written are lost then, so every recovered message must be flagged redelivered."""
    if not settings.data_dir or not os.path.isdir(settings.data_dir):
        return False
    marker = os.path.join(settings.data_dir, CLEAN_MARKER)
    if os.path.exists(marker):
        os.unlink(marker)
        return False
    # a crash leaves the runtime file (and perhaps its temporary copy): not data
    return any(
        name not in (CLEAN_MARKER, "lock") and not name.startswith(runtime_file.NAME)
        for name in os.listdir(settings.data_dir)
    )


def _lock_data_dir(settings: Settings) -> IO[str] | None:
    """One broker per data dir: a second one writing the same segments would corrupt them."""
    if not settings.data_dir:
        return None
    os.makedirs(settings.data_dir, exist_ok=True)
    handle = open(os.path.join(settings.data_dir, "lock"), "a")  # noqa: SIM115 - held until exit
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log.error("data dir %s is in use by another amqpd", settings.data_dir)
        raise SystemExit(1) from None
    return handle


async def _close_store(broker: Broker, store: Any, settings: Settings) -> None:
    """The last commit and the clean-stop marker. The store's reserve makes room for them on a full disk;
    should they fail all the same, one line says so and the next start recovers as after a crash (what was
    confirmed is on disk either way)."""
    broker.save_redelivered_flags()
    broker.save_stream_segments()
    try:
        await store.close()
        _leave_clean_marker(settings)
    except (OSError, sqlite3.Error) as exc:
        log.error("stopped without a clean-stop marker (%s): the next start recovers as after a crash", exc)


def _leave_clean_marker(settings: Settings) -> None:
    with open(os.path.join(settings.data_dir, CLEAN_MARKER), "w") as f:
        f.write("amqpd stopped cleanly; the store's delivered-marks are complete\n")
        f.flush()
        os.fsync(f.fileno())


async def _open_store(settings: Settings) -> tuple[Any, Any]:
    """The store and what it recovered; (None, None) for a broker that keeps nothing on disk."""
    if not settings.data_dir:
        return None, None
    from store import MessageStore

    if settings.fsync == "none":
        log.warning(
            "fsync=none: confirms do not wait for the disk; a power loss can lose confirmed messages "
            "(for tests and benchmarks only)"
        )
    store = MessageStore(
        settings.data_dir,
        segment_size=settings.segment_size,
        fsync=settings.fsync,
        retention_max_age_ms=settings.retention_max_age_ms,
        retention_max_bytes=settings.retention_max_bytes,
        max_unwritten_bytes=settings.max_unwritten_bytes,
        holds_log=is_stream,  # a stream's offsets stay runs from recovery on: memory must not grow with its length
        min_free_bytes=settings.disk_free_limit,
        reserve_bytes=settings.disk_reserve,
    )
    return store, await store.open(load_records=False)  # a recovered backlog is read back as it is consumed


def run(settings: Settings, services: Services) -> None:
    logs.configure(settings)
    run_loop(serve(settings, services))


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run serve() on a new event loop in this thread, uvloop's where it is installed."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)
