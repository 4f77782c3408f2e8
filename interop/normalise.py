"""Normalisation: remove from an observation what legitimately differs between brokers and runs.

- the run token `itp<10 hex>` of unique names → `<run>`
- server-generated names `amq.gen-…` and consumer tags `amq.ctag-…` → `amq.gen-#1`, `amq.ctag-#1`, …
  numbered by first appearance (so "the same queue twice" stays visible)
- client-generated uuids (kombu, pika, celery task ids) → `<uuid#n>` likewise
- timestamps: any dict key named `at`/`elapsed` is dropped (scenarios record times only as such)
- values under keys ending in `_hex` (raw bytes) are compared exactly, never rewritten
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(r"itp[0-9a-f]{10}")
_GEN = re.compile(r"amq\.(gen|ctag)-[A-Za-z0-9_\-]+")
_UUID = re.compile(
    r"(?<![0-9a-f])(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})(?![0-9a-f])"
)
_DROP_KEYS = {"at", "elapsed"}


class _Namer:
    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def gen(self, m: re.Match[str]) -> str:
        return self._num(m.group(0), f"amq.{m.group(1)}-#")

    def uuid(self, m: re.Match[str]) -> str:
        return self._num(m.group(0), "<uuid#")

    def _num(self, raw: str, prefix: str) -> str:
        if raw not in self.seen:
            n = sum(1 for v in self.seen.values() if v.startswith(prefix)) + 1
            self.seen[raw] = f"{prefix}{n}" + (">" if prefix.startswith("<") else "")
        return self.seen[raw]


def normalise(obs: Any) -> Any:
    return _walk(obs, _Namer())


def _walk(v: Any, namer: _Namer) -> Any:
    if isinstance(v, str):
        v = _TOKEN.sub("<run>", v)
        v = _GEN.sub(namer.gen, v)
        return _UUID.sub(namer.uuid, v)
    if isinstance(v, dict):
        return {
            _walk(k, namer): (x if str(k).endswith("_hex") else _walk(x, namer))
            for k, x in v.items()
            if k not in _DROP_KEYS
        }
    if isinstance(v, list | tuple):
        return [_walk(x, namer) for x in v]
    return v
