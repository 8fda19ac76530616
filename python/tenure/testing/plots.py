"""PNG pictures for ``tenure demo`` and ``tenure bench`` (matplotlib, the ``plots`` extra).

Each function writes one file and returns its path, or returns None, having said
why, when matplotlib is not installed: the text output stays complete without it.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any


def _pyplot(out: IO[str]) -> Any | None:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no screen
        import matplotlib.pyplot as plt
    except ImportError:
        print("  (no plots: matplotlib is not installed; pip install 'tenure[plots]')", file=out)
        return None
    return plt


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def timeline(
    path: Path,
    *,
    title: str,
    holds: Sequence[tuple[str, datetime, datetime, str]],
    events: Sequence[tuple[str, datetime]] = (),
    out: IO[str] | None = None,
) -> Path | None:
    """Who held leadership when: one row per holder, a bar per (holder, start, end, label),
    and vertical lines for events (a kill, say), all on the server's clock."""
    plt = _pyplot(out or sys.stdout)
    if plt is None or not holds:
        return None
    origin = min(start for _, start, _, _ in holds)
    rows = sorted({holder for holder, *_ in holds})
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.5 * len(rows)))
    for holder, start, end, label in holds:
        y = rows.index(holder)
        left, width = (start - origin).total_seconds(), (end - start).total_seconds()
        ax.barh(y, width, left=left, height=0.5)
        ax.text(left + width / 2, y, label, ha="center", va="center", fontsize=8, color="white")
    for label, when in events:
        x = (when - origin).total_seconds()
        ax.axvline(x, color="red", linestyle="--", linewidth=1)
        ax.text(x, len(rows) - 0.55, f" {label}", color="red", fontsize=8, va="top")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(f"seconds since {origin:%H:%M:%S.%f} UTC (server clock)")
    ax.set_title(title)
    return _save(plt, fig, path)


def bands(
    path: Path,
    *,
    title: str,
    rows: Sequence[str],
    spans: Sequence[tuple[str, float, float, str, str]],
    colours: Mapping[str, str],
    events: Sequence[tuple[str, float]] = (),
    xlabel: str,
    out: IO[str] | None = None,
) -> Path | None:
    """One band per row, top to bottom: a bar per (row, start, end, label, state) in the
    state's colour, its label written in it when it fits; vertical lines for events; a
    legend of the states. Times are seconds."""
    plt = _pyplot(out or sys.stdout)
    if plt is None or not spans:
        return None
    right = max(end for _, _, end, _, _ in spans)
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.42 * len(rows)))
    for row, start, end, label, state in spans:
        y = rows.index(row)
        ax.barh(y, end - start, left=start, height=0.6, color=colours[state])
        if label and (end - start) / right * 950 > 5.5 * len(label):  # about 950 px wide, 5.5 px a character
            ax.text((start + end) / 2, y, label, ha="center", va="center", fontsize=7)
    for label, when in events:
        ax.axvline(when, color="black", linestyle="--", linewidth=1)
        ax.text(when, -0.45, f" {label}", fontsize=8, va="bottom")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(len(rows) - 0.5, -0.9)  # the first row on top, room for the event labels above it
    ax.set_xlim(0, right)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in colours.values()]
    ax.legend(
        handles,
        list(colours),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18),
        ncol=len(colours),
        fontsize=8,
        frameon=False,
    )
    return _save(plt, fig, path)


def throughput(
    path: Path,
    *,
    title: str,
    series: Mapping[str, Sequence[tuple[float, int]]],
    unit: str,
    out: IO[str] | None = None,
) -> Path | None:
    """Rate over time for each run, from (monotonic time, cumulative count) samples."""
    plt = _pyplot(out or sys.stdout)
    if plt is None or not series:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for label, samples in series.items():
        if len(samples) < 2:
            continue
        start = samples[0][0]
        xs, ys = [], []
        step = max(1, len(samples) // 60)  # about 60 points a run, so the rate is not all noise
        for (t0, n0), (t1, n1) in zip(samples[::step], samples[step::step], strict=False):
            xs.append(t1 - start)
            ys.append((n1 - n0) / max(t1 - t0, 1e-9))
        ax.plot(xs, ys, label=label)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    return _save(plt, fig, path)


def per_key(
    path: Path,
    *,
    title: str,
    runs: Mapping[str, Sequence[tuple[float, str]]],
    highlight: str,
    out: IO[str] | None = None,
) -> Path | None:
    """Cumulative submissions per key over time, one panel per run; ``highlight`` (the
    flooding key) in red, every other key in grey."""
    plt = _pyplot(out or sys.stdout)
    if plt is None or not runs:
        return None
    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 4), sharey=True, squeeze=False)
    for ax, (label, submissions) in zip(axes[0], runs.items(), strict=True):
        by_key: dict[str, list[float]] = defaultdict(list)
        for t, key in sorted(submissions):
            by_key[key].append(t)
        for key, times in by_key.items():
            counts = range(1, len(times) + 1)
            if key == highlight:
                ax.plot(times, counts, color="red", linewidth=1.5, label=key)
            else:
                ax.plot(times, counts, color="grey", linewidth=0.5, alpha=0.6)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("seconds")
        ax.set_yscale("log")
    axes[0][0].set_ylabel("submissions so far, per key (log)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    return _save(plt, fig, path)
