"""AMQP 0-9-1 for the connector's executors: a blocking socket link, a bulk stream reader and a confirming
publisher, without a general-purpose client per message.

The handshake and every method we do not expect on the hot path go through pamqp; basic.deliver, the
content header and body frames, basic.ack/nack and basic.return are scanned with struct, the way
bench/codec.py's FrameScanner does. The reader consumes one stream from an offset with a large prefetch,
acks with `multiple` once per half window, and asks the broker (x-stream-timestamp) for each message's append
time; the offset and the append time are the last two fields of the headers table, read from its tail.
"""

from __future__ import annotations

import atexit
import select
import socket
import ssl
import struct
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from pamqp import commands, decode, encode
from pamqp import frame as pamqp_frame
from pamqp.header import ProtocolHeader

from amqpd.protocol.fastpath import shortstr as _shortstr
from amqpd.protocol.frames import frame as _frame

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
BODY_INTO = -FRAME_BODY  # Link.next_frame_into's body frame, its payload already where it was asked to be
BASIC_DELIVER = (60 << 16) | 60
BASIC_ACK = (60 << 16) | 80
BASIC_NACK = (60 << 16) | 120
BASIC_RETURN = (60 << 16) | 50
CHANNEL_CLOSE_OK = (20 << 16) | 41
CONNECTION_CLOSE = (10 << 16) | 50
PREFETCH = 20_000  # a stream consumer's window (basic.qos prefetch_count is 16 bits)
CHUNK_ARG = "x-amqpd-chunk"  # amqpd's chunk deliveries (amqpd/broker/streams/chunks.py)
# Records per chunk delivery asked for: 5,000 100-byte records fill most of the broker's 1 MiB. Each chunk has a
# fixed cost, so the broker's CPU per record falls with larger chunks (bench.spark measures it).
CHUNK_RECORDS = 5_000
CHUNK_PREFETCH = 4  # chunks in flight
CHUNK_LAYOUT_ARG = "x-amqpd-chunk-layout"  # the newest chunk layout the reader knows: the broker sends it or older
CHUNK_LAYOUT = 3
CHUNK_TYPES = {b"application/vnd.amqpd.stream-chunk.v2": 2, b"application/vnd.amqpd.stream-chunk.v3": 3}
RECV_BYTES = 1 << 20
# What a fill receives at most while chunks are read: a delivery's method and content header, and the start
# of its body. Its body frames are received into the batch's buffer (Link.next_frame_into): a larger fill
# would take them into the link's buffer, to be copied again.
CHUNK_RECV_BYTES = 4096
# A read's first batch is small and each next one twice the last, up to batch_rows: Spark's JVM starts on the
# rows once the first chunk is in instead of idling while a whole batch arrives. Every task of a read pays
# that wait at its start, on a cluster as on local[2] (here: 35-100 ms from consume-ok to the first batch at
# 32,768 rows, 2-15 ms now). From the fifth batch on they are full-sized: Spark's cost per batch is unchanged.
FIRST_BATCH_ROWS = 1_024
BATCH_BYTES = 64 << 20  # chunk bytes per record batch at most (and far below Arrow's 2 GiB of 32-bit offsets)
IDLE_TIMEOUT_S = 60.0  # a read that sees nothing for this long is an error, never a silent hang

_FRAME_HEADER = struct.Struct(">BHI")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_CONTENT_HEADER = struct.Struct(">HHQH")
_ACK = struct.Struct(">HHQB")
_OFFSET_TAIL = b"\x0fx-stream-offsetl"  # then 8 bytes; the broker appends it to the headers table
_TIME_TAIL = b"\x12x-stream-timestampl"  # then 8 bytes; appended after the offset when asked for
_TAIL = len(_OFFSET_TAIL) + 8 + len(_TIME_TAIL) + 8
_CHUNK_TABLE = struct.Struct(">I17sq15sq")  # a chunk's headers: x-stream-offset and x-amqpd-chunk, in that order
_CHUNK_NAMES = (b"\x0fx-stream-offsetl", b"\x0dx-amqpd-chunkl")
OWN_HEADERS = ("x-stream-offset", "x-stream-timestamp")

# basic properties flag bits, in the order their fields follow
F_CONTENT_TYPE, F_CONTENT_ENCODING, F_HEADERS, F_DELIVERY_MODE = 0x8000, 0x4000, 0x2000, 0x1000
F_PRIORITY, F_CORRELATION_ID, F_REPLY_TO, F_EXPIRATION = 0x0800, 0x0400, 0x0200, 0x0100
F_MESSAGE_ID, F_TIMESTAMP, F_TYPE, F_USER_ID, F_APP_ID, F_CLUSTER_ID = 0x80, 0x40, 0x20, 0x10, 0x08, 0x04
SHOWN = F_CONTENT_TYPE | F_HEADERS | F_CORRELATION_ID | F_MESSAGE_ID  # properties with a column


class BrokerError(RuntimeError):
    """The broker closed the channel or connection (its reply text is the message), or the link broke."""


class NotChunked(Exception):
    """The broker delivered message by message although chunks were asked for (it ignored x-amqpd-chunk)."""


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect; plain fields only, since Spark pickles it to the executors (an SSLContext
    does not pickle, so each Link builds its own)."""

    host: str
    port: int
    user: str
    password: str
    vhost: str
    tls: bool = False
    cacertfile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    verify: bool = True
    server_name: str | None = None

    @classmethod
    def parse(cls, uri: str) -> Endpoint:
        """amqp://user:pass@host:port/vhost or amqps://…, as RabbitMQ's URI spec reads them (an empty path is
        vhost "/"; amqps defaults to port 5671). TLS takes the query parameters RabbitMQ's clients use:
        cacertfile, certfile, keyfile, verify (verify_peer | verify_none), server_name_indication."""
        u = urllib.parse.urlsplit(uri)
        if u.scheme not in ("amqp", "amqps"):
            raise ValueError(f"uri: only amqp:// and amqps:// URIs are supported, got {uri!r}")
        tls = u.scheme == "amqps"
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(u.query).items()}
        verify = query.get("verify", "verify_peer")
        if verify not in ("verify_peer", "verify_none"):
            raise ValueError(f"uri: verify must be verify_peer or verify_none, got {verify!r}")
        path = u.path[1:] if u.path.startswith("/") else u.path
        vhost = urllib.parse.unquote(path) if u.path else "/"
        return cls(
            u.hostname or "127.0.0.1",
            u.port or (5671 if tls else 5672),
            urllib.parse.unquote(u.username or "guest"),
            urllib.parse.unquote(u.password or "guest"),
            vhost,
            tls=tls,
            cacertfile=query.get("cacertfile"),
            certfile=query.get("certfile"),
            keyfile=query.get("keyfile"),
            verify=verify == "verify_peer",
            server_name=query.get("server_name_indication"),
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The client side of amqps (and of an https management URI): the system's CAs, or cacertfile; a
        client certificate when certfile is given; no verification only when verify_none says so."""
        ctx = ssl.create_default_context(cafile=self.cacertfile)
        if self.certfile:
            ctx.load_cert_chain(self.certfile, self.keyfile)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def connect(self, timeout: float) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self.tls:
            return sock
        try:
            return self.ssl_context().wrap_socket(sock, server_hostname=self.server_name or self.host)
        except BaseException:
            sock.close()
            raise


class Link:
    """One connection with one channel (1), blocking. `buf[pos:end]` holds what was received and not yet
    used; buf is allocated once and received into (recv_into), so what arrives is copied once, from the
    socket into buf, before a frame's reader takes it: no bytes object per recv, no buffer grown by +=."""

    def __init__(self, endpoint: Endpoint, timeout: float = IDLE_TIMEOUT_S) -> None:
        self.sock = endpoint.connect(timeout)
        self.buf = bytearray(RECV_BYTES)
        self.pos = self.end = 0
        self.most = RECV_BYTES  # bytes a fill receives at most
        self.frame_max = 131072
        self._handshake(endpoint)

    def _handshake(self, ep: Endpoint) -> None:
        self.sock.sendall(pamqp_frame.marshal(ProtocolHeader(), 0))
        start = self.expect(commands.Connection.Start)
        self.server_properties: dict[str, Any] = dict(start.server_properties or {})
        response = f"\0{ep.user}\0{ep.password}"
        self.send_method(
            commands.Connection.StartOk(
                client_properties={"product": "amqpd.spark", "capabilities": {"publisher_confirms": True}},
                mechanism="PLAIN",
                response=response,
                locale="en_US",
            ),
            0,
        )
        tune = self.expect(commands.Connection.Tune)
        self.frame_max = tune.frame_max or self.frame_max
        self.send_method(commands.Connection.TuneOk(channel_max=1, frame_max=self.frame_max, heartbeat=0), 0)
        self.send_method(commands.Connection.Open(virtual_host=ep.vhost), 0)
        self.expect(commands.Connection.OpenOk)
        self.send_method(commands.Channel.Open(), 1)
        self.expect(commands.Channel.OpenOk)

    def send_method(self, method: Any, channel: int = 1) -> None:
        self.sock.sendall(pamqp_frame.marshal(method, channel))

    def fill(self, need: int = 0) -> None:
        """Receive more bytes after buf[pos:end] (at most `most` of them), what is left of them moved to
        buf's start first, and buf grown when `need` (the bytes from pos that the next frame takes) exceeds
        it: a frame larger than RECV_BYTES (frame_max above it)."""
        left = self.end - self.pos
        if self.pos:
            self.buf[:left] = self.buf[self.pos : self.end]
            self.pos, self.end = 0, left
        if need > len(self.buf):
            self.buf.extend(bytes(need - len(self.buf)))
        with memoryview(self.buf) as room:  # released at once: buf may grow on a later fill
            self.end += self.recv_into(room[left : max(left + self.most, need)])

    def recv_into(self, room: memoryview) -> int:
        """Receive into `room` (some of it, at least a byte)."""
        try:
            got = self.sock.recv_into(room)
        except TimeoutError as exc:
            raise BrokerError(f"no data from the broker for {self.sock.gettimeout()} s") from exc
        if not got:
            raise BrokerError("the broker closed the connection")
        return got

    def next_frame(self) -> tuple[int, int, int]:
        """(type, payload start, payload end) of the next whole frame in buf, reading as needed."""
        need = 7
        while True:
            if self.end - self.pos >= 7:
                kind, _, size = _FRAME_HEADER.unpack_from(self.buf, self.pos)
                end = self.pos + 7 + size
                if self.end > end:
                    start, self.pos = self.pos + 7, end + 1
                    return kind, start, end
                need = 8 + size
            self.fill(need)

    def next_frame_into(self, room: bytearray, at: int, left: int) -> tuple[int, int, int]:
        """As next_frame, but a body frame of at most `left` bytes (what the delivery's body still lacks) is
        put at room[at:], which has room for them: what buf holds of it is copied, the rest received there
        directly, so that most of a body is copied once, from the socket. It is returned as (BODY_INTO,
        start, end) in room. When more of the body follows, only the next frame's header is read after it:
        a fill of buf would take that frame's payload too."""
        while self.end - self.pos < 7:
            self.fill(7)
        kind, _, size = _FRAME_HEADER.unpack_from(self.buf, self.pos)
        if kind != FRAME_BODY or size > left:
            return self.next_frame()
        start = self.pos + 7
        have = min(self.end - start, size)
        with memoryview(room) as dest, memoryview(self.buf) as buf:
            dest[at : at + have] = buf[start : start + have]
            got = have
            while got < size:
                got += self.recv_into(dest[at + got : at + size])
        self.pos = start + have
        if self.pos == self.end:  # the frame end octet, and the next frame's header when the body goes on
            most, self.most = self.most, 8 if size < left else self.most
            try:
                self.fill(1)
            finally:
                self.most = most
        self.pos += 1
        return BODY_INTO, at, at + size

    def expect(self, kind: type) -> Any:
        """The next method, which must be `kind` (heartbeats skipped); a close is raised as BrokerError."""
        while True:
            ftype, start, end = self.next_frame()
            if ftype == FRAME_HEARTBEAT:
                continue
            raw = bytes(self.buf[start - 7 : end + 1])
            _, _, method = pamqp_frame.unmarshal(raw)
            if isinstance(method, kind):
                return method
            raise_unexpected(self, method)

    def close_channel(self) -> None:
        """Ask to close channel 1 (its consumer stops); reopen_channel(closing=True) takes the answer."""
        self.send_method(commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))

    def reopen_channel(self, closing: bool = False) -> None:
        """Close channel 1 (what the broker sent on it meanwhile is dropped) and open it afresh; `closing`:
        close_channel() asked already."""
        if not closing:
            self.close_channel()
        while True:
            kind, start, _ = self.next_frame()
            method = _U32.unpack_from(self.buf, start)[0] if kind == FRAME_METHOD else None
            if method == CHANNEL_CLOSE_OK:
                break
            if method == CONNECTION_CLOSE:  # the broker closed the connection meanwhile (a kept one, say)
                raise BrokerError("the broker closed the connection")
        self.send_method(commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)

    def close(self) -> None:
        try:
            self.send_method(commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 0)
        except OSError:
            pass
        self.sock.close()


def raise_unexpected(link: Link, method: Any) -> None:
    if isinstance(method, (commands.Channel.Close, commands.Connection.Close)):
        link.sock.close()
        raise BrokerError(f"{method.reply_code} {method.reply_text}")
    raise BrokerError(f"unexpected {method.name} from the broker")


# -- reading a stream -------------------------------------------------------------------------------------------


@dataclass
class Columns:
    """The rows read so far, column by column (stream is the partition's)."""

    offset: list[int] = field(default_factory=list)
    timestamp: list[int] = field(default_factory=list)
    exchange: list[str] = field(default_factory=list)
    routing_key: list[str] = field(default_factory=list)
    message_id: list[str | None] = field(default_factory=list)
    correlation_id: list[str | None] = field(default_factory=list)
    content_type: list[str | None] = field(default_factory=list)
    headers: list[dict[str, Any] | None] = field(default_factory=list)
    body: list[bytes] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offset)


PAD = 25  # zero bytes after a batch's chunk bodies: chunk_rows.py's fixed-width loads (_FIXED bytes) stay inside


@dataclass
class Chunks:
    """Chunk deliveries as received, not parsed here (spark/chunk_rows.py turns them into columns in bulk):
    their bodies back to back in `data`, each with its end there, first offset, count and layout; rows at
    offsets from `stop` on are not part of the read. The reader copies each body frame into `data` as it
    comes: no bytes object per frame or delivery, and no join of the batch's bodies. data is allocated for
    the batch (`capacity`) and doubled when short: grown a frame at a time, it was moved again and again.
    Every byte of data after the bodies is zero (at least PAD of them)."""

    stop: int
    capacity: int = 0  # bytes of bodies expected (an estimate)
    data: bytearray = field(init=False)
    ends: list[int] = field(default_factory=list)  # each body's end in data (the next one's start)
    firsts: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    layouts: list[int] = field(default_factory=list)  # each body's layout (2 or 3, streams/chunks.py)
    rows: int = 0  # offsets below stop that the chunks cover (damaged records among them included)
    size: int = 0  # bytes of the bodies, whole and the one being received

    def __post_init__(self) -> None:
        self.data = bytearray(self.capacity + PAD)

    def reserve(self, more: int) -> None:
        """Room for `more` bytes of bodies after size (and PAD after them)."""
        short = self.size + more + PAD - len(self.data)
        if short > 0:
            self.data += bytes(max(short, len(self.data)))

    def extend(self, part: bytes | bytearray | memoryview) -> None:
        """Part of the body being received (a body frame's payload)."""
        end = self.size + len(part)
        self.reserve(len(part))
        self.data[self.size : end] = part
        self.size = end

    def received(self, size: int) -> None:
        """`size` bytes of the body being received were put at data[size:] (reserved)."""
        self.size += size

    def drop_open(self) -> None:
        """Forget what was received of a body not yet whole (a new delivery began)."""
        whole = self.ends[-1] if self.ends else 0
        if self.size > whole:
            self.data[whole : self.size] = bytes(self.size - whole)
            self.size = whole

    def close(self, first: int, count: int, layout: int) -> None:
        """The body received since the last one is whole: its records are offsets first.. first + count - 1."""
        self.ends.append(self.size)
        self.firsts.append(first)
        self.counts.append(count)
        self.layouts.append(layout)
        self.rows += max(min(count, self.stop - first), 0)

    def add(self, body: bytes | bytearray | memoryview, first: int, count: int, layout: int = 2) -> None:
        self.drop_open()
        self.extend(body)
        self.close(first, count, layout)

    def spans(self) -> list[tuple[int, int]]:
        """Each body's (start, end) in data."""
        return list(zip([0, *self.ends[:-1]], self.ends, strict=True))

    @property
    def bodies(self) -> list[bytes]:
        """Each body, copied out of data."""
        return [bytes(self.data[start:end]) for start, end in self.spans()]

    def __len__(self) -> int:
        return self.rows


def _shortstr_at(buf: bytes | bytearray, pos: int) -> tuple[str, int]:
    n = buf[pos]
    return buf[pos + 1 : pos + 1 + n].decode("utf-8", "replace"), pos + 1 + n


def scan_properties(
    buf: bytes | bytearray, pos: int, flags: int
) -> tuple[str | None, int, int, str | None, str | None]:
    """The properties the columns show, from a content header's property list at `pos` (after the flags):
    content type, where the headers table is (start of its size field, end; 0, 0 without), correlation id,
    message id."""
    content_type = correlation_id = message_id = None
    table = table_end = 0
    if flags & F_CONTENT_TYPE:
        content_type, pos = _shortstr_at(buf, pos)
    if flags & F_CONTENT_ENCODING:
        pos += 1 + buf[pos]
    if flags & F_HEADERS:
        table = pos
        table_end = pos = pos + 4 + _U32.unpack_from(buf, pos)[0]
    if flags & F_DELIVERY_MODE:
        pos += 1
    if flags & F_PRIORITY:
        pos += 1
    if flags & F_CORRELATION_ID:
        correlation_id, pos = _shortstr_at(buf, pos)
    if flags & F_REPLY_TO:
        pos += 1 + buf[pos]
    if flags & F_EXPIRATION:
        pos += 1 + buf[pos]
    if flags & F_MESSAGE_ID:
        message_id, pos = _shortstr_at(buf, pos)
    return content_type, table, table_end, correlation_id, message_id


def read_properties(buf: bytearray, pos: int, flags: int, with_headers: bool, out: Columns) -> None:
    """Append one message's properties (its header frame from `pos`, after the flags) to the columns."""
    content_type, table_at, end, correlation_id, message_id = scan_properties(buf, pos, flags)
    headers: dict[str, Any] | None = None
    offset = stamp = -1
    if flags & F_HEADERS:
        pos = table_at
        size = end - pos - 4
        if size >= _TAIL and buf[end - _TAIL : end - _TAIL + len(_OFFSET_TAIL)] == _OFFSET_TAIL:
            offset = _I64.unpack_from(buf, end - _TAIL + len(_OFFSET_TAIL))[0]
            stamp = _I64.unpack_from(buf, end - 8)[0]
            if with_headers:
                headers = table_headers(bytes(buf[pos:end]))
        else:  # not laid out as the broker appends them: decode the table
            table = decode.field_table(bytes(buf[pos:end]))[1]
            if "x-stream-timestamp" not in table:
                raise BrokerError(
                    "the broker sent no x-stream-timestamp header: it predates the connector "
                    "(amqpd with GET /api/queues/{vhost}/{queue}/offset is needed)"
                )
            offset, stamp = int(table.pop("x-stream-offset", -1)), int(table.pop("x-stream-timestamp"))  # type: ignore[arg-type]
            headers = table if with_headers else None
    if offset < 0:
        raise BrokerError("a delivery without x-stream-offset: is the queue a stream?")
    out.offset.append(offset)
    out.timestamp.append(stamp)
    out.content_type.append(content_type)
    out.correlation_id.append(correlation_id)
    out.message_id.append(message_id)
    out.headers.append(headers if with_headers else None)


def chunk_position(buf: bytearray, pos: int, flags: int) -> tuple[int, int, int]:
    """A chunk delivery's first offset, count and layout, from its content header's properties at `pos`;
    NotChunked when the delivery is a single message (a broker that ignored x-amqpd-chunk)."""
    if not flags & F_CONTENT_TYPE:
        raise NotChunked
    n = buf[pos]
    layout = CHUNK_TYPES.get(bytes(buf[pos + 1 : pos + 1 + n]))
    if layout is None:
        raise NotChunked
    _, name1, first, name2, count = _CHUNK_TABLE.unpack_from(buf, pos + 1 + n)
    if (name1, name2) != _CHUNK_NAMES:
        raise BrokerError("a chunk delivery whose headers are not x-stream-offset and x-amqpd-chunk")
    return first, count, layout


def table_headers(raw: bytes) -> dict[str, Any]:
    """A headers table (its size field first) as a per-message delivery shows it: the broker's own fields
    left out."""
    headers = decode.field_table(raw)[1]
    for name in OWN_HEADERS:
        headers.pop(name, None)
    return headers


# A Python worker runs task after task (spark.python.worker.reuse, on by default): the connection a range was
# read on is kept for the worker's next read from the same broker. When a read ends its channel is asked to
# close (which stops its consumer, and drops what was in flight); the next read takes that answer and opens
# the channel afresh: one round trip, not a new connection's handshake for each task of each micro-batch.
class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class KeptConnections(Generic[C]):
    """A Python worker's connections kept between its tasks, one per broker: the newest kept wins (two at
    once in one worker is not how Spark runs tasks), and all are closed at the worker's exit (the broker sees
    a close, not a dropped socket)."""

    def __init__(self) -> None:
        self.by_endpoint: dict[Endpoint, C] = {}
        atexit.register(self.close_all)

    def take(self, endpoint: Endpoint) -> C | None:
        return self.by_endpoint.pop(endpoint, None)

    def keep(self, endpoint: Endpoint, conn: C) -> None:
        old = self.by_endpoint.pop(endpoint, None)
        if old is not None:
            old.close()
        self.by_endpoint[endpoint] = conn

    def close_all(self) -> None:
        while self.by_endpoint:
            self.by_endpoint.popitem()[1].close()


_parked: KeptConnections[Link] = KeptConnections()
close_parked = _parked.close_all


def _reader_link(endpoint: Endpoint) -> Link:
    """The worker's parked connection to the broker with a fresh channel, or a new connection when there is
    none or it broke meanwhile."""
    link = _parked.take(endpoint)
    if link is not None:
        try:
            link.reopen_channel(closing=True)
            return link
        except (BrokerError, OSError):
            link.sock.close()
    return Link(endpoint)


def _park(endpoint: Endpoint, link: Link) -> None:
    try:
        link.close_channel()
    except OSError:
        link.sock.close()
        return
    _parked.keep(endpoint, link)


class StreamReader:
    """Reads one stream's offsets [start, end) in order, in batches of about `batch_rows` (the first few
    smaller: FIRST_BATCH_ROWS)."""

    def __init__(
        self,
        endpoint: Endpoint,
        stream: str,
        start: int,
        end: int,
        *,
        with_headers: bool,
        batch_rows: int = 32_768,
        prefetch: int = PREFETCH,
        chunk_records: int = CHUNK_RECORDS,
        chunk_layout: int = CHUNK_LAYOUT,
    ) -> None:
        self.endpoint = endpoint
        self.stream = stream
        self.start = start
        self.end = end
        self.with_headers = with_headers
        self.batch_rows = batch_rows
        self.prefetch = prefetch
        self.chunk_records = chunk_records  # 0: message by message only
        self.chunk_layout = chunk_layout  # 2: not asked for, as a reader older than layout 3
        self.first_offset: int | None = None  # where the broker began: above start when retention deleted it

    def batches(self) -> Iterator[Columns | Chunks]:
        """Chunk deliveries when asked for and the broker honours them (nothing is yielded before the first
        delivery tells which), else message by message on a fresh channel."""
        if self.start >= self.end:
            return
        link = _reader_link(self.endpoint)
        finished = False
        try:
            yield from self._read(link)
            finished = True
        finally:
            if finished:
                _park(self.endpoint, link)
            else:  # an error, or the caller stopped early: the channel may be anywhere in the range
                link.close()

    def _read(self, link: Link) -> Iterator[Columns | Chunks]:
        if self.chunk_records:
            try:
                self._consume(link, self._chunk_prefetch(), self._chunk_arguments())
                yield from self._deliveries(link, _ByChunk(self))
                return
            except NotChunked:
                link.reopen_channel()
        self._consume(link, self._window(), {})
        yield from self._scan(link)

    def _consume(self, link: Link, prefetch: int, arguments: dict[str, Any]) -> None:
        link.send_method(commands.Basic.Qos(prefetch_count=prefetch))
        link.expect(commands.Basic.QosOk)
        arguments = {"x-stream-offset": self.start, "x-stream-timestamp": True, **arguments}
        link.send_method(commands.Basic.Consume(queue=self.stream, consumer_tag="amqpd.spark", arguments=arguments))
        link.expect(commands.Basic.ConsumeOk)

    def _span(self) -> int:
        return self.end - self.start

    def _window(self) -> int:
        return max(min(self.prefetch, self._span()), 1)

    def _chunk(self) -> int:
        return max(min(self.chunk_records, self._span()), 1)

    def _chunk_arguments(self) -> dict[str, Any]:
        if self.chunk_layout > 2:
            return {CHUNK_ARG: self._chunk(), CHUNK_LAYOUT_ARG: self.chunk_layout}
        return {CHUNK_ARG: self._chunk()}

    def _chunk_prefetch(self) -> int:
        return min(CHUNK_PREFETCH, -(-self._span() // self._chunk()))

    def _scan(self, link: Link) -> Iterator[Columns]:
        return self._deliveries(link, _ByMessage(self))

    def _deliveries(self, link: Link, rows: _Rows[B]) -> Iterator[B]:
        """Deliveries as they arrive, in batches of rows (`rows`: chunk by chunk, or message by message).
        Credit: an ack (multiple) of the delivery that reaches offset X lets the broker send `window` more
        deliveries past it, so acks stop once those would reach the range's last offset (enough_at), and the
        broker sends nothing past the range (it used to send up to a whole window more, read and dropped).
        Until then the reader acks every `ack_every` deliveries. Chunks may be shorter than asked (the broker
        stops one at a size in bytes): once all the credit is held, the reader acks whatever the estimate
        says, so it never waits for a delivery the broker may not send."""
        last = self.end - 1
        window, ack_every = rows.window, rows.ack_every
        enough_at = last - window * rows.unit
        covered = enough_at < self.start
        held = tag = body_size = got = 0
        target = min(FIRST_BATCH_ROWS, self.batch_rows)
        out = rows.batch(target)
        link.most, direct = rows.recv_bytes, rows.direct
        while True:
            room = rows.room(out, body_size - got) if direct and got < body_size else None
            kind, start, end = link.next_frame() if room is None else link.next_frame_into(*room, body_size - got)
            buf = link.buf
            if kind == FRAME_METHOD:
                if _U32.unpack_from(buf, start)[0] != BASIC_DELIVER:
                    _, _, method = pamqp_frame.unmarshal(bytes(buf[start - 7 : end + 1]))
                    raise_unexpected(link, method)
                pos = start + 4
                pos += 1 + buf[pos]  # consumer tag
                tag = _U64.unpack_from(buf, pos)[0]
                rows.delivered(buf, pos + 9)  # after the tag and the redelivered flag
                continue
            if kind == FRAME_HEADER:
                _, _, body_size, flags = _CONTENT_HEADER.unpack_from(buf, start)
                rows.header(buf, start + 14, flags, body_size, out)
                got = 0
                if body_size:
                    continue
            elif kind == FRAME_BODY or kind == BODY_INTO:
                if kind == FRAME_BODY:
                    rows.part(out, buf, start, end)
                else:
                    rows.received(out, end - start)
                got += end - start
                if got < body_size:
                    continue
            else:
                continue
            first, reached = rows.body(out)
            if self.first_offset is None:
                self.first_offset = first
            done = reached >= last
            held += 1
            if done or held >= window or (not covered and (held >= ack_every or reached >= enough_at)):
                link.sock.sendall(_frame(FRAME_METHOD, 1, _ACK.pack(60, 80, tag, 1)))
                held = 0
                covered = covered or reached >= enough_at
            if done:
                yield out
                return
            if rows.full(out, target):
                yield out
                target = min(2 * target, self.batch_rows)
                out = rows.batch(target)


B = TypeVar("B", Columns, Chunks)


class _Rows(Protocol[B]):
    """How StreamReader._deliveries turns deliveries into rows, and counts credit, in one mode."""

    window: int  # deliveries in flight (basic.qos)
    ack_every: int  # deliveries per ack, until the acks would let the broker past the range
    unit: int  # offsets per delivery, at most
    recv_bytes: int  # what the link's fills receive at most
    direct: bool  # whether bodies may be received where `room` says

    def batch(self, rows: int) -> B:
        """A new batch, to hold about `rows` rows."""
        ...

    def delivered(self, buf: bytearray, pos: int) -> None:
        """basic.deliver's fields after the delivery tag and the redelivered flag."""

    def header(self, buf: bytearray, pos: int, flags: int, size: int, out: B) -> None:
        """The content header's properties (from `pos`, after the flags) and body size: a new delivery
        begins."""

    def room(self, out: B, left: int) -> tuple[bytearray, int] | None:
        """Where the body's next bytes go (`left` of them: room for all), when they are to be received there
        directly (Link.next_frame_into: then `received` is told of them, else `part`)."""
        ...

    def part(self, out: B, buf: bytearray, start: int, end: int) -> None:
        """A body frame's payload, buf[start:end] (buf is the link's: copy what is kept)."""

    def received(self, out: B, size: int) -> None:
        """A body frame's payload of `size` bytes is where `room` said."""

    def body(self, out: B) -> tuple[int, int]:
        """The delivery is whole: (its first offset, its last)."""
        ...

    def full(self, out: B, rows: int) -> bool:
        """The batch has `rows` rows or more (or is as large as a batch may be)."""
        ...


class _ByMessage:
    """StreamReader._scan message by message: a row per delivery, its properties scanned here."""

    def __init__(self, reader: StreamReader) -> None:
        self.with_headers = reader.with_headers
        self.window = reader._window()  # noqa: SLF001
        self.ack_every = max(self.window // 2, 1)
        self.unit = 1  # offsets per delivery
        self.recv_bytes = RECV_BYTES
        self.direct = False
        self.exchange = self.routing_key = ""
        self.parts: list[bytes] = []

    def batch(self, rows: int) -> Columns:
        return Columns()

    def delivered(self, buf: bytearray, pos: int) -> None:
        self.exchange, pos = _shortstr_at(buf, pos)
        self.routing_key, pos = _shortstr_at(buf, pos)

    def header(self, buf: bytearray, pos: int, flags: int, size: int, out: Columns) -> None:
        read_properties(buf, pos, flags, self.with_headers, out)
        out.exchange.append(self.exchange)
        out.routing_key.append(self.routing_key)
        self.parts = []

    def room(self, out: Columns, left: int) -> None:
        """A message's body is a bytes object of its own: copied from the link's buffer."""

    def part(self, out: Columns, buf: bytearray, start: int, end: int) -> None:
        self.parts.append(bytes(buf[start:end]))

    def received(self, out: Columns, size: int) -> None:
        raise AssertionError("a message's body is not received directly")

    def body(self, out: Columns) -> tuple[int, int]:
        parts = self.parts
        out.body.append(parts[0] if len(parts) == 1 else b"".join(parts))
        return out.offset[-1], out.offset[-1]

    def full(self, out: Columns, rows: int) -> bool:
        return len(out) >= rows


class _ByChunk:
    """StreamReader._scan chunk by chunk: the bodies are kept as they came (spark/chunk_rows.py reads them),
    credit is counted in chunks."""

    def __init__(self, reader: StreamReader) -> None:
        self.stop = reader.end
        self.window = reader._chunk_prefetch()  # noqa: SLF001
        self.ack_every = 1
        self.unit = reader._chunk()  # noqa: SLF001
        self.recv_bytes = CHUNK_RECV_BYTES
        self.direct = True
        self.first = self.count = 0
        self.layout = 2
        self.last = (0, 1)  # the last chunk's body size and count: sizes the next batch

    def batch(self, rows: int) -> Chunks:
        """A batch takes whole chunks until it has `rows` rows (or those left of the range), or BATCH_BYTES: as
        many as that, of the last one's size (and a sixteenth more: chunks of one count differ in size by a few
        frame headers)."""
        size, count = self.last
        rows = min(rows, max(self.stop - self.first - self.count, 1))
        return Chunks(self.stop, min(-(-rows // count) * size * 17 // 16, BATCH_BYTES))

    def delivered(self, buf: bytearray, pos: int) -> None:
        """A chunk's routing key is the stream's: nothing to read."""

    def header(self, buf: bytearray, pos: int, flags: int, size: int, out: Chunks) -> None:
        self.first, self.count, self.layout = chunk_position(buf, pos, flags)
        out.drop_open()
        out.reserve(min(size, BATCH_BYTES))  # what a broker says, not an allocation of any size
        self.last = (size, max(self.count, 1))

    def room(self, out: Chunks, left: int) -> tuple[bytearray, int] | None:
        return (out.data, out.size) if out.size + left + PAD <= len(out.data) else None

    def part(self, out: Chunks, buf: bytearray, start: int, end: int) -> None:
        with memoryview(buf) as view:  # released at once: the link's buf may move or grow on its next fill
            out.extend(view[start:end])

    def received(self, out: Chunks, size: int) -> None:
        out.received(size)

    def body(self, out: Chunks) -> tuple[int, int]:
        out.close(self.first, self.count, self.layout)
        return self.first, self.first + self.count - 1

    def full(self, out: Chunks, rows: int) -> bool:
        return len(out) >= rows or out.size >= BATCH_BYTES


# -- publishing ---------------------------------------------------------------------------------------------------


@dataclass
class Outgoing:
    """One message to publish."""

    body: bytes
    exchange: str = ""
    routing_key: str = ""
    message_id: str | None = None
    correlation_id: str | None = None
    content_type: str | None = None
    headers: dict[str, Any] | None = None
    timestamp: int | None = None  # the AMQP timestamp property: seconds since the epoch


def encode_publish(msg: Outgoing, frame_max: int) -> bytes:
    """basic.publish (mandatory), its content header (persistent) and body frames."""
    method = b"\x00\x3c\x00\x28\x00\x00" + _shortstr(msg.exchange) + _shortstr(msg.routing_key) + b"\x01"
    flags = F_DELIVERY_MODE
    props = b""
    if msg.content_type is not None:
        flags |= F_CONTENT_TYPE
        props += _shortstr(msg.content_type)
    if msg.headers:
        flags |= F_HEADERS
        props += encode.field_table(msg.headers)
    props += b"\x02"
    if msg.correlation_id is not None:
        flags |= F_CORRELATION_ID
        props += _shortstr(msg.correlation_id)
    if msg.message_id is not None:
        flags |= F_MESSAGE_ID
        props += _shortstr(msg.message_id)
    if msg.timestamp is not None:
        flags |= F_TIMESTAMP
        props += _U64.pack(msg.timestamp)
    header = _CONTENT_HEADER.pack(60, 0, len(msg.body), flags) + props
    out = _frame(FRAME_METHOD, 1, method) + _frame(FRAME_HEADER, 1, header)
    room = frame_max - 8
    body = msg.body
    for i in range(0, len(body), room):
        out += _frame(FRAME_BODY, 1, body[i : i + room])
    return out


class Publisher:
    """Publishes with confirms; `flush()` returns once every message sent so far is confirmed, and raises if
    the broker nacked one or returned one as unroutable."""

    def __init__(self, endpoint: Endpoint, window: int = 2_000) -> None:
        self.link = Link(endpoint)
        self.link.send_method(commands.Confirm.Select())
        self.link.expect(commands.Confirm.SelectOk)
        self.window = window
        self.sent = 0
        self.confirmed = 0
        self.nacked = 0
        self.returned: list[str] = []
        self._pending = bytearray()

    def publish(self, msg: Outgoing) -> None:
        self._pending += encode_publish(msg, self.link.frame_max)
        self.sent += 1
        if len(self._pending) >= 1 << 16:
            self._send()
        while self.sent - self.confirmed > self.window:
            self._read_confirms()

    def _send(self) -> None:
        if self._pending:
            self.link.sock.sendall(self._pending)
            self._pending = bytearray()

    def flush(self) -> int:
        self._send()
        while self.confirmed < self.sent:
            self._read_confirms()
        if self.returned:
            raise BrokerError(f"{len(self.returned)} message(s) were unroutable: {self.returned[0]}")
        if self.nacked:
            raise BrokerError(f"the broker refused (nacked) {self.nacked} message(s)")
        return self.sent

    def _read_confirms(self) -> None:
        self._send()
        link = self.link
        kind, start, end = link.next_frame()
        if kind != FRAME_METHOD:
            return  # a returned message's content frames
        buf = link.buf
        method_id = _U32.unpack_from(buf, start)[0]
        if method_id in (BASIC_ACK, BASIC_NACK):
            tag, multiple = struct.unpack_from(">QB", buf, start + 4)
            count = tag - self.confirmed if multiple & 1 else 1
            self.confirmed += count
            if method_id == BASIC_NACK:
                self.nacked += count
            return
        _, _, method = pamqp_frame.unmarshal(bytes(buf[start - 7 : end + 1]))
        if isinstance(method, commands.Basic.Return):
            self.returned.append(
                f"{method.reply_code} {method.reply_text} (exchange '{method.exchange}', "
                f"routing key '{method.routing_key}')"
            )
            return
        raise_unexpected(link, method)

    def idle_and_open(self) -> bool:
        """Every message confirmed and nothing from the broker since: a connection fit for more publishing.
        A broker that closed the connection (or went away) meanwhile has left something to read."""
        link = self.link
        if self.confirmed < self.sent or self._pending or link.pos < link.end:
            return False
        sock = link.sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):  # closed
            return False
        return not readable

    def close(self) -> None:
        self.link.close()
