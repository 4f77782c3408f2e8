"""A published message as the broker holds it: opaque encoded properties and body, shared by every queue."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from amqpd import errors
from amqpd.protocol.constants import FLAG_DELIVERY_MODE, FLAG_EXPIRATION, FLAG_HEADERS, FLAG_PRIORITY
from amqpd.protocol.methods import decode_table
from amqpd.protocol.properties import PropertyScan, decode_properties, raw_property

SCANNED_FLAGS = FLAG_DELIVERY_MODE | FLAG_EXPIRATION | FLAG_HEADERS | FLAG_PRIORITY


class Message:
    """One published message. `header` is the content-header payload as the publisher sent it,
    forwarded verbatim to consumers; `route` is the encoded exchange + routing key shortstrs."""

    __slots__ = (
        "exchange",
        "routing_key",
        "route",
        "header",
        "body",
        "flags",
        "persistent",
        "priority",
        "ttl_ms",
        "timestamp_ms",
        "store_offset",
        "_headers",
        "size",
        "pageable",
        "bcc",
        "on_settled",
        "holders",
        "may_carry_cc",
        "for_streams",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        route: bytes,
        header: bytes,
        body: bytes,
        flags: int,
        scan: PropertyScan | None = None,
    ) -> None:
        """scan: the header's PropertyScan when the caller has one already (messages of a run share it)."""
        self.exchange = exchange
        self.routing_key = routing_key
        self.route = route
        self.header = header
        self.body: bytes | None = body  # None while paged out to the store (see Queue.push)
        self.size = len(body)
        self.pageable = False  # every queue holding it is durable, so the store can always give it back
        self.on_settled: Callable[[], None] | None = None  # the confirm, if all holders ack before the fsync
        self.holders = 0  # durable queues that still hold it, while on_settled waits
        self.for_streams = False  # transient, yet stored: only the streams it reached hold its record
        # BCC routing keys: the header goes before delivery, the keys are remembered (strip_bcc sets a list)
        self.bcc: Sequence[str] = ()
        self.flags = flags
        self.persistent = False
        self.priority: int | None = None
        self.ttl_ms: int | None = None  # from the expiration property
        self.timestamp_ms = 0
        self.store_offset: int | None = None
        self._headers: dict | None | bool = False  # False: not decoded yet
        self.may_carry_cc = False  # the headers table may hold CC or BCC routing keys
        if flags & SCANNED_FLAGS:
            self._apply_scan(scan or PropertyScan(header, flags))

    def _apply_scan(self, scan: PropertyScan) -> None:
        mode = scan.delivery_mode
        if mode is not None and mode != 1 and mode != 2:
            raise errors.ChannelError(
                errors.PRECONDITION_FAILED, f"invalid message: {{delivery_mode_unknown,{mode}}}", 60, 40
            )
        self.persistent = mode == 2
        self.priority = scan.priority
        if scan.expiration is not None:
            self.ttl_ms = parse_expiration(scan.expiration)
        raw = scan.headers_raw
        if raw is None:
            self._headers = None
        else:
            self.may_carry_cc = may_name_keys(raw)

    @property
    def headers(self) -> dict | None:
        """The headers table, decoded on first use (headers exchange, CC/BCC)."""
        if self._headers is False:
            scan = PropertyScan(self.header, self.flags)
            self._headers = decode_table(scan.headers_raw) if scan.headers_raw else None
        return self._headers  # type: ignore[return-value]

    @property
    def has_headers(self) -> bool:
        return bool(self.flags & FLAG_HEADERS)

    def properties(self):  # noqa: ANN201 - pamqp Basic.Properties
        """Every property decoded by pamqp: for tests and tools only. pamqp refuses values RabbitMQ passes
        through (a timestamp past year 9999), so the broker reads what it needs with raw_property()."""
        return decode_properties(self.header)

    def raw_property(self, flag: int) -> bytes | None:
        return raw_property(self.header, self.flags, flag)


def may_name_keys(headers_raw: bytes) -> bool:
    """Whether an encoded headers table may hold CC or BCC routing keys. A key is a shortstr: its length byte,
    then the name. Without either byte string the table has neither key and routing needs no decode; a match
    inside a value only costs the decode. Both names hold a "C": looking for that one byte (memchr) first is
    several times cheaper than either substring search, and most tables have none."""
    return 67 in headers_raw and (b"\x02CC" in headers_raw or b"\x03BCC" in headers_raw)


MAX_EXPIRY_TIMER = 4294967295


def parse_expiration(value: str) -> int:
    """The expiration property: milliseconds as a decimal string, read as RabbitMQ reads it (an optional sign,
    then digits), from 0 up to its largest timer."""
    digits = value[1:] if value[:1] in "+-" else value
    if not digits.isdigit() or not digits.isascii():
        raise _invalid(value, f'{{invalid_format,<<"{value}">>}}')
    ms = int(value)
    if ms < 0:
        raise _invalid(value, f"{{value_negative,{ms}}}")
    if ms > MAX_EXPIRY_TIMER:
        raise _invalid(value, f"{{value_too_large,{ms},{MAX_EXPIRY_TIMER}}}")
    return ms


def _invalid(value: str, reason: str) -> errors.ChannelError:
    return errors.ChannelError(errors.PRECONDITION_FAILED, f"invalid expiration '{value}': {reason}", 60, 40)


class LogDelivery(Message):
    """A stream's record as one consumer gets it (StreamDelivery in streams/stream.py, ChunkDelivery in
    streams/chunks.py): persistent, with no TTL, priority, routing or store step of its own, so what every such
    delivery shares is read from the class rather than set per message."""

    __slots__ = ()
    persistent = True
    priority = ttl_ms = store_offset = on_settled = None  # type: ignore[assignment]
    _headers = False  # type: ignore[assignment]
    pageable = for_streams = False  # type: ignore[assignment]
    holders = 0  # type: ignore[assignment]
    bcc = ()  # type: ignore[assignment]
