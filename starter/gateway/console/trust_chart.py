"""The trust page's trend line, drawn on the server: each part of the window with counted
outcomes is a point (its success rate), consecutive parts joined. Plain SVG geometry for
the template (presentation attributes only: the console's CSP allows no inline style)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from schemas.trust import TrustSlice

WIDTH, HEIGHT, PAD = 240, 64, 4


@dataclass(frozen=True)
class Point:
    index: int
    x: float
    y: float
    samples: int
    rate: float
    starts: datetime


@dataclass(frozen=True)
class Trend:
    """One capability version's and kind of traffic's line: its points and the runs of
    consecutive points (each a polyline's ``points`` attribute)."""

    points: tuple[Point, ...]
    runs: tuple[str, ...]
    summary: str
    width: int = WIDTH
    height: int = HEIGHT


def trend(parts: Iterable[TrustSlice], slices: int, since: datetime, until: datetime) -> Trend:
    """The line of ``parts`` (one capability version and kind of traffic) over a window
    of ``slices`` parts."""
    step = (until - since) / slices
    span = (WIDTH - 2 * PAD) / max(slices - 1, 1)
    points = tuple(
        Point(
            index=p.index,
            x=round(PAD + p.index * span, 1),
            y=round(PAD + (1 - p.success_rate) * (HEIGHT - 2 * PAD), 1),
            samples=p.samples,
            rate=p.success_rate,
            starts=since + p.index * step,
        )
        for p in sorted(parts, key=lambda p: p.index)
    )
    runs: list[list[Point]] = []
    for point in points:
        if runs and runs[-1][-1].index == point.index - 1:
            runs[-1].append(point)
        else:
            runs.append([point])
    lines = tuple(" ".join(f"{p.x},{p.y}" for p in run) for run in runs if len(run) > 1)
    return Trend(points, lines, _summary(points, slices))


def _summary(points: tuple[Point, ...], slices: int) -> str:
    if not points:
        return "No counted outcomes in this window."
    low = min(points, key=lambda p: p.rate)
    high = max(points, key=lambda p: p.rate)
    return (
        f"Success rate in {len(points)} of {slices} parts of the window: "
        f"lowest {low.rate:.0%}, highest {high.rate:.0%}, last {points[-1].rate:.0%}."
    )
