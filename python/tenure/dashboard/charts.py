"""Charts drawn on the server as inline SVG: a timeline (who held what, when) and stacked
bars (how many per time bucket). Every label goes through ``escape``; no script."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from markupsafe import Markup, escape

WIDTH, LANE, LEFT, AXIS = 900, 22, 180, 18
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f", "#bab0ac")


def colour(name: object) -> str:
    """A stable colour per name (an instance id, a status)."""
    digest = hashlib.sha256(str(name).encode()).digest()
    return PALETTE[digest[0] % len(PALETTE)]


def _x(when: datetime, start: datetime, span: float) -> float:
    offset = (when - start).total_seconds() / span if span > 0 else 0.0
    return LEFT + max(0.0, min(1.0, offset)) * (WIDTH - LEFT - 10)


def _axis(start: datetime, end: datetime, y: float) -> list[str]:
    parts = [f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH - 10}" y2="{y}" stroke="#888"/>']
    for i in range(5):
        when = start + (end - start) * i / 4
        x = _x(when, start, (end - start).total_seconds())
        parts.append(
            f'<text x="{x:.1f}" y="{y + 13}" font-size="10" text-anchor="middle">{when:%H:%M:%S}</text>'
        )
    return parts


def timeline(
    rows: Sequence[dict[str, Any]],
    *,
    lane: str,
    start: str,
    end: str,
    label: str,
    now: datetime,
    window: timedelta,
    title: str,
) -> Markup:
    """One lane per distinct ``row[lane]``; a bar from ``row[start]`` to ``row[end]`` (or
    now, while it runs) coloured by ``row[label]``, clipped to the last ``window``."""
    since = now - window
    lanes: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row[end] is not None and row[end] < since:
            continue
        lanes.setdefault(str(row[lane]), []).append(row)
    height = max(1, len(lanes)) * LANE + AXIS + 8
    span = window.total_seconds()
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {height}" width="100%" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
    ]
    if not lanes:
        parts.append(f'<text x="{LEFT}" y="14" font-size="12">nothing in this window</text>')
    for i, (name, segments) in enumerate(sorted(lanes.items())):
        y = i * LANE + 2
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 14}" font-size="11" text-anchor="end">{escape(name[:28])}</text>'
        )
        for row in segments:
            x0 = _x(max(row[start], since), since, span)
            x1 = _x(row[end] or now, since, span)
            until = "now" if row[end] is None else f"{row[end]:%H:%M:%S}"
            tip = f"{row[label]}: {row[start]:%H:%M:%S} to {until}"
            parts.append(
                f'<rect x="{x0:.1f}" y="{y}" width="{max(1.0, x1 - x0):.1f}" height="{LANE - 6}" '
                f'fill="{colour(row[label])}" stroke="#fff"><title>{escape(tip)}</title></rect>'
            )
    parts += _axis(since, now, len(lanes) * LANE + 4)
    parts.append("</svg>")
    return Markup("".join(parts))


def bars(rows: Sequence[dict[str, Any]], *, now: datetime, window: timedelta, title: str) -> Markup:
    """Stacked bars of ``n`` per ``bucket``, one colour per ``grp``, with a legend."""
    since = now - window
    span = window.total_seconds()
    step = max(1, int(span) // 60)
    totals: dict[datetime, int] = {}
    for row in rows:
        totals[row["bucket"]] = totals.get(row["bucket"], 0) + int(row["n"])
    top = max(totals.values(), default=0)
    plot = 120
    groups = sorted({str(row["grp"]) for row in rows})
    height = plot + AXIS + 8 + 16 * ((len(groups) + 3) // 4)
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {height}" width="100%" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<text x="{LEFT - 6}" y="12" font-size="10" text-anchor="end">{top}</text>',
        f'<text x="{LEFT - 6}" y="{plot}" font-size="10" text-anchor="end">0</text>',
    ]
    if not rows:
        parts.append(f'<text x="{LEFT + 6}" y="{plot // 2}" font-size="12">nothing in this window</text>')
    width = (WIDTH - LEFT - 10) / 60
    stacked: dict[datetime, float] = {}
    for row in sorted(rows, key=lambda r: (str(r["grp"]), r["bucket"])):
        h = plot * int(row["n"]) / top if top else 0
        base = stacked.get(row["bucket"], 0.0)
        stacked[row["bucket"]] = base + h
        x = _x(row["bucket"], since, span)
        tip = f"{row['grp']}: {row['n']} in {step} s from {row['bucket']:%H:%M:%S}"
        parts.append(
            f'<rect x="{x:.1f}" y="{plot - base - h:.1f}" width="{max(1.0, width - 1):.1f}" height="{h:.1f}" '
            f'fill="{colour(row["grp"])}"><title>{escape(tip)}</title></rect>'
        )
    parts += _axis(since, now, plot + 2)
    for i, group in enumerate(groups):
        x, y = LEFT + (i % 4) * 170, plot + AXIS + 14 + 16 * (i // 4)
        parts.append(
            f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colour(group)}"/>'
            f'<text x="{x + 14}" y="{y}" font-size="11">{escape(group[:24])}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
