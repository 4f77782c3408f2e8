"""Content assembly: basic.publish, then its content header, then body frames up to the declared size.

No I/O and no broker: it checks the order and sizes with RabbitMQ's reply codes and hands back a whole
message. (A publish whose three frames arrive together skips it: FrameReader's PUBLISH item.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from amqpd import errors
from amqpd.protocol.fastpath import parse_content_header, parse_publish_route
from amqpd.protocol.frames import BodyPart


@dataclass(slots=True)
class Assembled:
    exchange: str
    routing_key: str
    route: bytes  # the exchange and routing key shortstrs as sent, reused in every delivery
    mandatory: bool
    header: bytes  # the content header payload as sent
    flags: int
    body: bytes  # or a bytearray typed as bytes: a large body the frame reader filled in place (_joined)


def assembly_error(text: str) -> errors.ConnectionError:
    """RabbitMQ's command assembler names the method being assembled, basic.publish."""
    return errors.ConnectionError(errors.UNEXPECTED_FRAME, text, 60, 40)


class ContentAssembler:
    __slots__ = ("_method", "_header", "_flags", "_parts", "_remaining", "max_size")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._method: tuple[str, str, bytes, bool] | None = None
        self._header: bytes | None = None
        self._flags = 0
        self._parts: list[bytes | BodyPart] = []
        self._remaining = 0

    @property
    def busy(self) -> bool:
        return self._method is not None

    def expect_method(self) -> None:
        """A method frame arrived: fine unless a message is half-assembled."""
        if self._header is not None:
            raise assembly_error("expected content body, got non content body frame instead")
        if self._method is not None:
            raise assembly_error("expected content header for class 60, got non content header frame instead")

    def begin(self, payload: bytes) -> None:
        exchange, routing_key, route, bits = parse_publish_route(payload)
        if bits & 2:
            raise errors.ConnectionError(errors.NOT_IMPLEMENTED, "immediate=true", 60, 40)
        self._method = (exchange, routing_key, route, bool(bits & 1))
        self._header = None

    def take_header(self, payload: bytes) -> Assembled | None:
        if self._method is None:
            raise errors.unexpected_frame("expected method frame, got non method frame instead")
        if self._header is not None:
            raise assembly_error("expected content body, got non content body frame instead")
        class_id, body_size, flags = parse_content_header(payload)
        if class_id != 60:
            raise assembly_error(f"expected content header for class 60, got one for class {class_id} instead")
        if body_size > self.max_size:
            self._method = None  # refused before the body arrives; its frames are dropped with the channel
            raise errors.ChannelError(
                errors.PRECONDITION_FAILED,
                f"message size {body_size} is larger than configured max size {self.max_size}",
                60,
                40,
            )
        self._header, self._flags, self._remaining, self._parts = payload, flags, body_size, []
        return self._finish() if body_size == 0 else None

    def take_body(self, payload: bytes | BodyPart) -> Assembled | None:
        if self._header is None:
            if self._method is None:
                raise errors.unexpected_frame("expected method frame, got non method frame instead")
            raise assembly_error("expected content header for class 60, got non content header frame instead")
        if len(payload) > self._remaining:
            raise errors.unexpected_frame("content body exceeds the size its header declared")
        self._parts.append(payload)
        self._remaining -= len(payload)
        return self._finish() if self._remaining == 0 else None

    def _finish(self) -> Assembled:
        assert self._method is not None and self._header is not None
        exchange, routing_key, route, mandatory = self._method
        body = _joined(self._parts)
        done = Assembled(exchange, routing_key, route, mandatory, self._header, self._flags, body)
        self.reset()
        return done

    def reset(self) -> None:
        self._method, self._header, self._parts = None, None, []


def _joined(parts: list[bytes | BodyPart]) -> bytes:
    """The body from its frames' payloads: the reader's buffer when it filled the whole body (it arms one at
    the content header, so it holds every body frame after it), else the payloads joined."""
    if not parts:
        return b""
    first = parts[0]
    if isinstance(first, BodyPart):
        body = first.body
        if sum(map(len, parts)) != len(body):  # a bug of ours: the connection gets an internal error
            raise RuntimeError("a body filled by the frame reader does not match its frames")
        # Passed on as bytes, which it is in all but type: nothing writes to it once the reader let go of it
        # (and store/frame.py keeps it in a batch uncopied on that ground).
        return cast(bytes, body)
    if len(parts) == 1:
        return first
    return b"".join(parts)  # type: ignore[arg-type]
