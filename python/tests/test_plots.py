"""The demo's and the bench's pictures are real PNG files with what they claim to show."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from tenure.testing import plots

PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path | None) -> bool:
    return path is not None and path.read_bytes().startswith(PNG) and path.stat().st_size > 5_000


def test_timeline_throughput_and_per_key(tmp_path: Path) -> None:
    t0 = datetime(2026, 11, 26, 1, 0, tzinfo=UTC)
    holds = [
        ("instance-1", t0, t0 + timedelta(seconds=4), "term 1"),
        ("instance-2", t0 + timedelta(seconds=5.2), t0 + timedelta(seconds=9), "term 2"),
    ]
    assert is_png(
        plots.timeline(
            tmp_path / "t.png", title="t", holds=holds, events=[("SIGKILL", t0 + timedelta(seconds=4))]
        )
    )
    series = {"a": [(i * 0.1, i * 50) for i in range(100)], "b": [(i * 0.1, i * 20) for i in range(100)]}
    assert is_png(plots.throughput(tmp_path / "r.png", title="r", series=series, unit="batches/s"))
    runs = {"fifo": [(i * 0.01, "flood" if i < 500 else f"k{i % 9}") for i in range(900)]}
    assert is_png(plots.per_key(tmp_path / "k.png", title="k", runs=runs, highlight="flood"))


def test_nothing_to_draw_draws_nothing(tmp_path: Path) -> None:
    assert plots.timeline(tmp_path / "t.png", title="t", holds=[]) is None
    assert not (tmp_path / "t.png").exists()


def test_bands(tmp_path: Path) -> None:
    spans = [
        ("database", 0.0, 4.0, "timeline 1", "up"),
        ("database", 4.0, 6.5, "", "down"),
        ("e0", 0.5, 4.0, "term 1", "held"),
    ]
    picture = plots.bands(
        tmp_path / "b.png",
        title="b",
        rows=["database", "e0"],
        spans=spans,
        colours={"up": "tab:green", "down": "tab:red", "held": "tab:orange"},
        events=[("SIGKILL", 4.0)],
        xlabel="seconds",
    )
    assert is_png(picture)
