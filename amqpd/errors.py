"""AMQP errors as exceptions: one type per reply-code family, carrying class and method ids.

The connection layer turns a ChannelError into channel.close and a ConnectionError into
connection.close; nothing below it writes a close frame itself.
"""

from __future__ import annotations

# Reply codes (AMQP 0-9-1 spec, as RabbitMQ uses them).
REPLY_SUCCESS = 200
CONTENT_TOO_LARGE = 311
NO_ROUTE = 312
NO_CONSUMERS = 313
CONNECTION_FORCED = 320
INVALID_PATH = 402
ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

REPLY_NAMES = {
    REPLY_SUCCESS: "OK",
    CONTENT_TOO_LARGE: "CONTENT_TOO_LARGE",
    NO_ROUTE: "NO_ROUTE",
    NO_CONSUMERS: "NO_CONSUMERS",
    CONNECTION_FORCED: "CONNECTION_FORCED",
    INVALID_PATH: "INVALID_PATH",
    ACCESS_REFUSED: "ACCESS_REFUSED",
    NOT_FOUND: "NOT_FOUND",
    RESOURCE_LOCKED: "RESOURCE_LOCKED",
    PRECONDITION_FAILED: "PRECONDITION_FAILED",
    FRAME_ERROR: "FRAME_ERROR",
    SYNTAX_ERROR: "SYNTAX_ERROR",
    COMMAND_INVALID: "COMMAND_INVALID",
    CHANNEL_ERROR: "CHANNEL_ERROR",
    UNEXPECTED_FRAME: "UNEXPECTED_FRAME",
    RESOURCE_ERROR: "RESOURCE_ERROR",
    NOT_ALLOWED: "NOT_ALLOWED",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    INTERNAL_ERROR: "INTERNAL_ERROR",
}


class AMQPError(Exception):
    """An error with an AMQP reply code; class_id/method_id name the offending method (0 if none)."""

    connection_level = False

    def __init__(self, code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.class_id = class_id
        self.method_id = method_id

    @property
    def reply_text(self) -> str:
        """The text RabbitMQ puts in close frames: 'NAME - detail'."""
        return f"{REPLY_NAMES.get(self.code, 'ERROR')} - {self.text}"

    @property
    def wire_text(self) -> str:
        """reply_text as a close frame can carry it: at most 255 bytes of UTF-8 (a name received with invalid
        UTF-8 is kept as surrogates; here they become U+FFFD)."""
        text = self.reply_text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raw = text.encode()
        return text if len(raw) <= 255 else raw[:255].decode("utf-8", "ignore")

    def with_method(self, class_id: int, method_id: int) -> AMQPError:
        """Fill in the offending method when the raiser did not know it."""
        if not self.class_id:
            self.class_id, self.method_id = class_id, method_id
        return self


class ChannelError(AMQPError):
    """Closes the channel only."""


class ConnectionError(AMQPError):  # noqa: A001 - the AMQP name, shadowing the builtin is deliberate here
    """Closes the whole connection."""

    connection_level = True


def not_found(text: str) -> ChannelError:
    return ChannelError(NOT_FOUND, text)


def access_refused(text: str) -> ChannelError:
    return ChannelError(ACCESS_REFUSED, text)


def resource_locked(text: str) -> ChannelError:
    return ChannelError(RESOURCE_LOCKED, text)


def precondition_failed(text: str) -> ChannelError:
    return ChannelError(PRECONDITION_FAILED, text)


def not_implemented(text: str) -> ConnectionError:
    return ConnectionError(NOT_IMPLEMENTED, text)


def command_invalid(text: str) -> ConnectionError:
    return ConnectionError(COMMAND_INVALID, text)


def not_allowed(text: str) -> ConnectionError:
    return ConnectionError(NOT_ALLOWED, text)


def frame_error(text: str) -> ConnectionError:
    return ConnectionError(FRAME_ERROR, text)


def syntax_error(text: str) -> ConnectionError:
    return ConnectionError(SYNTAX_ERROR, text)


def unexpected_frame(text: str) -> ConnectionError:
    return ConnectionError(UNEXPECTED_FRAME, text)
