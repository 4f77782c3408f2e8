"""Percentiles of weighted samples (a confirm completes many messages at once) and medians over rounds."""

from __future__ import annotations

import math
import statistics


def weighted_percentiles(samples: list[tuple[int, int]], points: tuple[float, ...]) -> list[float]:
    """Nearest-rank percentiles of (value, weight) samples; NaN when there are none."""
    total = sum(w for _, w in samples)
    if not total:
        return [math.nan for _ in points]
    ordered = sorted(samples)
    out = []
    for p in points:
        rank = max(1, math.ceil(p / 100 * total))
        seen = 0
        for value, weight in ordered:
            seen += weight
            if seen >= rank:
                out.append(float(value))
                break
    return out


def median(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.median(finite) if finite else math.nan
