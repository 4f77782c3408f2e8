"""Where a stream starts and ends, and which offset a time maps to: asked of the broker's HTTP API on the
driver (`GET /api/queues/{vhost}/{stream}`'s `stream` object, `GET …/offset?timestamp=`), so a replayed
micro-batch reads exactly the offsets it was planned with."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from amqpd.spark.wire import Endpoint


@dataclass(frozen=True)
class Bounds:
    """A stream's offsets: `first` is the oldest kept, `end` the next one to come (readable: [first, end))."""

    first: int
    end: int


class Positions:
    def __init__(self, management_uri: str, endpoint: Endpoint) -> None:
        self.base = management_uri.rstrip("/")
        token = base64.b64encode(f"{endpoint.user}:{endpoint.password}".encode()).decode()
        self.auth = f"Basic {token}"
        self.vhost = urllib.parse.quote(endpoint.vhost, safe="")
        # an https management URI is checked with the amqps URI's CA and client certificate (one set of files)
        self.context = endpoint.ssl_context() if self.base.startswith("https:") else None

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(self.base + path, headers={"Authorization": self.auth})
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            if exc.code == 404:
                raise ValueError(f"amqpd: no such stream ({path}): {detail}") from exc
            raise RuntimeError(f"amqpd management API {exc.code} for {path}: {detail}") from exc

    def bounds(self, stream: str) -> Bounds:
        q = self._get(f"/api/queues/{self.vhost}/{urllib.parse.quote(stream, safe='')}")
        info = q.get("stream")
        if q.get("type") != "stream" or info is None:
            raise ValueError(f"amqpd: queue '{stream}' is not a stream (x-queue-type: stream)")
        first = int(info["first_offset"])
        committed = info["committed_offset"]
        return Bounds(first, first if committed is None else int(committed) + 1)

    def offset_at(self, stream: str, timestamp_ms: int) -> int:
        """The first offset appended at or after the time (the stream's end when none is that recent)."""
        path = f"/api/queues/{self.vhost}/{urllib.parse.quote(stream, safe='')}/offset?timestamp={timestamp_ms}"
        return int(self._get(path)["offset"])
