"""Per-stream figures from a streaming query's progress, as Kafka's source reports per partition.

Spark's Python data source API (pyspark 4.0 to 4.3) gives a source no way to add metrics of its own to the
progress: DataSourceStreamReader has no metrics method, and the JVM side of a Python source does not
implement ReportsSourceMetrics, through which Kafka's source reports its offsets behind. What the progress
does carry for each source: `startOffset` and `endOffset` (the batch's range, per stream) and, from pyspark
4.2 on, `latestOffset` (each stream's end when the batch was planned: the reader's reportLatestOffset()).
A stream's offsets are dense, so these give each stream's rows in the batch and the offsets it is behind:

    for source in stream_metrics(query.lastProgress).values(): ...
"""

from __future__ import annotations

import json
from typing import Any


def _offsets(raw: Any) -> dict[str, int]:
    """An offset as the progress holds it: JSON text, a dict, or None (before the first batch)."""
    if raw is None:
        return {}
    parsed = json.loads(raw) if isinstance(raw, str) else raw
    return {str(k): int(v) for k, v in (parsed or {}).items()}


def stream_metrics(progress: Any, source: int = 0) -> dict[str, dict[str, int | None]]:
    """{stream: {"numInputRows": rows of the stream in the batch, "offsetsBehind": offsets waiting after the
    batch's end (None when pyspark, before 4.2, does not report the latest offset)}} for one of the query's
    sources (the first by default). `progress` is a StreamingQueryProgress or its dict (query.lastProgress,
    an item of query.recentProgress)."""
    info = progress["sources"][source]
    start, end, latest = (_offsets(info.get(k)) for k in ("startOffset", "endOffset", "latestOffset"))
    return {
        stream: {
            "numInputRows": offset - start.get(stream, offset),
            "offsetsBehind": max(latest[stream] - offset, 0) if stream in latest else None,
        }
        for stream, offset in end.items()
    }
