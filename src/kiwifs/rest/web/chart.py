"""The dashboard's history chart as inline SVG, drawn on the server (no JavaScript library).

Two series over the days of the timeline: unmerged episodes (bars, left axis) and coverage, the
merged share of the episodes (a line, right axis, 0–100 %). Days are placed by date, so a gap
in the history shows as a gap. Every label is escaped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from markupsafe import Markup, escape

from kiwifs.memory.timeline import TimelinePoint

WIDTH, HEIGHT = 760, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 56, 16, 36
TOOLTIP_POINTS = 400  # above this many days, bars carry no tooltip (keeps the page small)


def _x_positions(points: Sequence[TimelinePoint]) -> tuple[list[float], float]:
    days = [dt.date.fromisoformat(p.day).toordinal() for p in points]
    first, last = days[0], days[-1]
    span = max(1, last - first)
    inner = WIDTH - LEFT - RIGHT
    slot = inner / (span + 1)
    return [LEFT + (d - first) * slot + slot / 2 for d in days], slot


def _nice_max(value: int) -> int:
    """A round axis maximum at or above ``value`` with four whole steps (4, 8, 20, 40, 100…)."""
    wanted = max(1, value) / 4
    magnitude = 1
    while True:
        for step in (1, 2, 5):
            if step * magnitude >= wanted:
                return 4 * step * magnitude
        magnitude *= 10


def timeline_svg(points: Sequence[TimelinePoint]) -> Markup:
    """The chart, or a short note when there is no history yet."""
    if not points:
        return Markup(
            '<p class="muted" id="chart-empty">No history yet: the chart shows one'
            " point per day once the root has commits.</p>"
        )
    xs, slot = _x_positions(points)
    top_value = _nice_max(max(p.unmerged for p in points))
    plot_h = HEIGHT - TOP - BOTTOM
    base = TOP + plot_h

    def y_count(v: int) -> float:
        return base - (v / top_value) * plot_h

    def y_share(f: float) -> float:
        return base - f * plot_h

    parts = [
        f'<svg class="chart" id="timeline-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img"'
        ' aria-labelledby="chart-title" xmlns="http://www.w3.org/2000/svg">',
        '<title id="chart-title">Unmerged episodes and coverage per day</title>',
    ]
    for i in range(5):
        y = TOP + plot_h * i / 4
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        count = top_value * (4 - i) // 4
        parts.append(
            f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{count}</text>'
        )
        right = WIDTH - RIGHT + 6
        parts.append(f'<text class="axis share" x="{right}" y="{y + 4:.1f}">{(4 - i) * 25}%</text>')
    bar_w = max(1.0, min(24.0, slot * 0.7))
    tooltips = len(points) <= TOOLTIP_POINTS
    for x, p in zip(xs, points, strict=True):
        y = y_count(p.unmerged)
        label = escape(
            f"{p.day}: {p.unmerged} unmerged of {p.episodic}, {p.coverage * 100:.1f}% merged"
        )
        tip = f"<title>{label}</title>" if tooltips else ""
        parts.append(
            f'<rect class="bar" x="{x - bar_w / 2:.1f}" y="{y:.1f}" width="{bar_w:.1f}"'
            f' height="{base - y:.1f}">{tip}</rect>'
        )
    line = " ".join(f"{x:.1f},{y_share(p.coverage):.1f}" for x, p in zip(xs, points, strict=True))
    parts.append(f'<polyline class="share-line" points="{line}"/>')
    if len(points) == 1:
        cy = y_share(points[0].coverage)
        parts.append(f'<circle class="share-dot" cx="{xs[0]:.1f}" cy="{cy:.1f}" r="3"/>')
    parts.append(f'<text class="axis" x="{LEFT}" y="{HEIGHT - 10}">{escape(points[0].day)}</text>')
    if len(points) > 1:
        parts.append(
            f'<text class="axis" x="{WIDTH - RIGHT}" y="{HEIGHT - 10}" text-anchor="end">'
            f"{escape(points[-1].day)}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - built from numbers and escaped labels
