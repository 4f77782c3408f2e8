"""Validation of x-arguments on queue and exchange declarations, with RabbitMQ's error texts."""

from __future__ import annotations

from typing import Any

from amqpd import errors

MAX_EXPIRY_TIMER = 4294967295  # ms: RabbitMQ's largest timer, the bound of every TTL

# Arguments RabbitMQ compares when a queue is redeclared; others may differ freely.
QUEUE_EQUIVALENCE_ARGS = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-type",
    "x-delivery-limit",
    "x-single-active-consumer",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
)
EXCHANGE_EQUIVALENCE_ARGS = ("alternate-exchange",)


def amqp_type_name(value: Any) -> str:
    """The name RabbitMQ uses for a field value's type in error texts."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "long" if -(2**31) <= value < 2**31 else "longlong"
    if isinstance(value, str):
        return "longstr"
    if isinstance(value, float):
        return "double"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _invalid(name: str, queue: str, vhost: str, detail: str) -> errors.ChannelError:
    return errors.precondition_failed(f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': {detail}")


def _check_int(name: str, value: Any, queue: str, vhost: str, minimum: int) -> None:
    if not _is_int(value):
        raise _invalid(name, queue, vhost, f"{{unacceptable_type,{amqp_type_name(value)}}}")
    if value < minimum:
        kind = "value_zero" if value == 0 else "value_negative"
        raise _invalid(name, queue, vhost, f"{{{kind},{value}}}")


_ONE_OF = {
    "x-overflow": ("drop-head", "reject-publish", "reject-publish-dlx"),
    "x-queue-mode": ("default", "lazy"),
    "x-queue-type": ("classic", "quorum", "stream"),
}


def check_queue_arguments(args: dict, queue: str, vhost: str) -> None:
    for name, minimum in (
        ("x-expires", 1),
        ("x-message-ttl", 0),
        ("x-max-length", 0),
        ("x-max-length-bytes", 0),
        ("x-max-priority", 0),
    ):
        if name in args:
            _check_int(name, args[name], queue, vhost, minimum)
    for name in ("x-expires", "x-message-ttl"):
        if name in args and args[name] > MAX_EXPIRY_TIMER:
            raise _invalid(name, queue, vhost, f"{{value_too_large,{args[name]},{MAX_EXPIRY_TIMER}}}")
    if "x-max-priority" in args and args["x-max-priority"] > 255:
        raise _invalid("x-max-priority", queue, vhost, f"{{value_too_large,{args['x-max-priority']},255}}")
    for name in ("x-dead-letter-exchange", "x-dead-letter-routing-key"):
        if name in args and not isinstance(args[name], (str, bytes)):
            raise _invalid(name, queue, vhost, f"{{unacceptable_type,{amqp_type_name(args[name])}}}")
    if "x-dead-letter-routing-key" in args and "x-dead-letter-exchange" not in args:
        raise _invalid("x-dead-letter-routing-key", queue, vhost, "{no_dlx,x-dead-letter-routing-key}")
    for name, allowed in _ONE_OF.items():
        if name in args and args[name] not in allowed:
            if name == "x-queue-type":
                raise errors.precondition_failed(
                    f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': "
                    f"queue type '{args[name]}' is not supported by this broker"
                )
            raise _invalid(name, queue, vhost, f"{{unacceptable_value,{args[name]}}}")
    if "x-single-active-consumer" in args and not isinstance(args["x-single-active-consumer"], bool):
        value = args["x-single-active-consumer"]
        raise _invalid("x-single-active-consumer", queue, vhost, f"{{unacceptable_type,{amqp_type_name(value)}}}")


_TYPE_NAMES = {"quorum": "rabbit_quorum_queue", "stream": "rabbit_stream_queue"}


def check_server_named(args: dict) -> None:
    """Only a classic queue may be named by the server (RabbitMQ's is_server_named_allowed): quorum queues
    and streams live on after their declarer, under a name someone has to know."""
    kind = _TYPE_NAMES.get(args.get("x-queue-type"))  # type: ignore[arg-type]
    if kind is not None:
        raise errors.precondition_failed(f"Cannot declare a server-named queue for type {kind}")


def check_queue_type(args: dict, queue: str, vhost: str, durable: bool, exclusive: bool, auto_delete: bool) -> None:
    """A quorum queue (kept here as a durable classic queue with quorum's declaration rules) must be
    durable, shared and not auto-delete, as RabbitMQ requires."""
    if args.get("x-queue-type") != "quorum":
        return
    for bad, prop in ((not durable, "non-durable"), (exclusive, "exclusive-owner"), (auto_delete, "auto-delete")):
        if bad:
            raise errors.precondition_failed(f"invalid property '{prop}' for queue '{queue}' in vhost '{vhost}'")


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def inequivalent(kind: str, name: str, vhost: str, arg: str, received: Any, current: Any) -> errors.ChannelError:
    return errors.precondition_failed(
        f"inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': "
        f"received '{_fmt(received)}' but current is '{_fmt(current)}'"
    )


def inequivalent_arg(kind: str, name: str, vhost: str, arg: str, received: Any, current: Any) -> errors.ChannelError:
    def describe(value: Any) -> str:
        if value is None:
            return "none"
        return f"the value '{_fmt(value)}' of type '{amqp_type_name(value)}'"

    return errors.precondition_failed(
        f"inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': "
        f"received {describe(received)} but current is {describe(current)}"
    )


def check_equivalent_args(kind: str, name: str, vhost: str, keys: tuple[str, ...], new: dict, old: dict) -> None:
    for key in keys:
        if new.get(key) != old.get(key) or type(new.get(key)) is not type(old.get(key)):
            raise inequivalent_arg(kind, name, vhost, key, new.get(key), old.get(key))
