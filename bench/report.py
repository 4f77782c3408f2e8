"""Medians over rounds, the side-by-side table, and the JSON + PNG written to bench/results/."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.stats import median

RunRecord = dict[str, Any]  # {"round", "scenario", "target", "metrics" | None, "error" | None}
Medians = dict[str, dict[str, dict[str, float]]]  # scenario -> metric -> target -> median


def medians(runs: list[RunRecord], targets: list[str]) -> Medians:
    out: Medians = {}
    for run in runs:
        for metric in (run["metrics"] or {}).keys():
            out.setdefault(run["scenario"], {}).setdefault(metric, {})
    for scenario, metrics in out.items():
        for metric, per_target in metrics.items():
            for target in targets:
                values = [
                    r["metrics"][metric]
                    for r in runs
                    if r["scenario"] == scenario and r["target"] == target and r["metrics"] and metric in r["metrics"]
                ]
                per_target[target] = median(values) if values else math.nan
    return out


def direction(metric: str) -> str:
    """'higher', 'lower', or '' for diagnostics (CPU cores, blocked %, queued count) that explain a result."""
    if metric.endswith("/s"):
        return "higher"
    if "us/msg" in metric or "latency" in metric or "RSS" in metric:
        return "lower"
    return ""


def ratio(values: dict[str, float], baseline: str, other: str) -> float:
    a, b = values.get(baseline, math.nan), values.get(other, math.nan)
    return b / a if a and not math.isnan(a) and not math.isnan(b) else math.nan


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def table(meds: Medians, targets: list[str], errors: dict[tuple[str, str], str]) -> str:
    """One row per scenario metric (↑ higher is better, ↓ lower is better, no arrow: diagnostic); the last
    column is the second target over the first (amqpd/RabbitMQ)."""
    head = ["scenario", "metric", *targets]
    if len(targets) == 2:
        head.append(f"{targets[1]}/{targets[0]}")
    rows = [head]
    for scenario, metrics in meds.items():
        for metric, values in metrics.items():
            arrow = {"higher": "↑", "lower": "↓"}.get(direction(metric), "")
            row = [scenario, f"{metric} {arrow}".strip(), *(_fmt(values[t]) for t in targets)]
            if len(targets) == 2:
                row.append(_fmt(ratio(values, *targets)))
            rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines += [f"{s} on {t} failed: {e.splitlines()[0]}" for (s, t), e in sorted(errors.items())]
    return "\n".join(lines)


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=2, default=_json_default))


def _json_default(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return None
    raise TypeError(type(value).__name__)


def write_chart(path: Path, meds: Medians, targets: list[str], title: str) -> None:
    """Small multiples: one panel per table row (units differ), bars per target labelled with the median."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on the bench machine
    import matplotlib.pyplot as plt

    cells = [(s, m, v) for s, metrics in meds.items() for m, v in metrics.items()]
    cols = 6
    rows = max(1, math.ceil(len(cells) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 3.2, rows * 2.4), squeeze=False)
    colors = ["#ff6600", "#1f77b4", "#2ca02c"]
    for ax, (scenario, metric, values) in zip(axes.flat, cells, strict=False):
        heights = [0.0 if math.isnan(values[t]) else values[t] for t in targets]
        bars = ax.bar(targets, heights, color=colors[: len(targets)])
        for bar, t in zip(bars, targets, strict=True):
            ax.annotate(
                _fmt(values[t]),
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
            )
        arrow = {"higher": " ↑", "lower": " ↓"}.get(direction(metric), "")
        ax.set_title(f"{scenario} {metric}{arrow}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)  # "1e6" offsets hide the real values
        ax.margins(y=0.2)
    for ax in list(axes.flat)[len(cells) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))  # leave room for the title
    fig.savefig(path, dpi=90)
    plt.close(fig)
