"""Lossless text encoding of AMQP argument tables for the catalogue.

JSON alone would blur types that AMQP tables keep apart (bytes, Decimal, datetime, int vs bool), so every
value is tagged: [tag, value]. The encoding is canonical (sorted keys) so that equal tables encode to equal
strings, which is what lets a binding's arguments be part of its primary key.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from decimal import Decimal
from typing import Any


def encode_arguments(arguments: dict[str, Any]) -> str:
    return json.dumps(_tag(arguments), sort_keys=True, separators=(",", ":"))


def decode_arguments(text: str) -> dict[str, Any]:
    value = _untag(json.loads(text))
    if not isinstance(value, dict):
        raise ValueError("an argument table must decode to a dict")
    return value


def _tag(value: Any) -> list[Any]:
    # bool before int: bool is a subclass of int.
    if value is None:
        return ["n"]
    if isinstance(value, bool):
        return ["b", value]
    if isinstance(value, int):
        return ["i", value]
    if isinstance(value, float):
        return ["f", value.hex()]  # hex keeps every bit, NaN and infinities included
    if isinstance(value, str):
        return ["s", value]
    if isinstance(value, bytes | bytearray | memoryview):
        return ["x", base64.b64encode(bytes(value)).decode()]
    if isinstance(value, Decimal):
        return ["d", str(value)]
    if isinstance(value, datetime):
        return ["t", value.isoformat()]
    if isinstance(value, dict):
        return ["T", {str(k): _tag(v) for k, v in value.items()}]
    if isinstance(value, list | tuple):
        return ["A", [_tag(v) for v in value]]
    raise TypeError(f"cannot store argument value of type {type(value).__name__}")


def _untag(item: list[Any]) -> Any:
    tag = item[0]
    if tag == "n":
        return None
    value = item[1]
    if tag in ("b", "i", "s"):
        return value
    if tag == "f":
        return float.fromhex(value)
    if tag == "x":
        return base64.b64decode(value)
    if tag == "d":
        return Decimal(value)
    if tag == "t":
        return datetime.fromisoformat(value)
    if tag == "T":
        return {k: _untag(v) for k, v in value.items()}
    if tag == "A":
        return [_untag(v) for v in value]
    raise ValueError(f"unknown argument tag {tag!r}")
