"""Line charts as inline SVG, laid out here and drawn by the template: no chart library, no JS.

Coordinates are computed in Python so the template only places numbers; a chart of 60 points
costs microseconds and the page stays readable without scripts.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

WIDTH, HEIGHT = 480, 160
LEFT, RIGHT, TOP, BOTTOM = 56, 8, 10, 22
COLOURS = ("#2e6be6", "#e0873b", "#12b76a", "#d92d20", "#7a5af8", "#667085", "#0e9384")


@dataclass(frozen=True)
class Line:
    name: str
    colour: str
    points: str  # "x,y x,y …" for <polyline points>
    total: float


@dataclass(frozen=True)
class Chart:
    title: str
    lines: list[Line]
    y_max: str
    x_labels: list[tuple[float, str, str]]  # (x, text-anchor, text)
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    plot_top: int = TOP
    plot_bottom: int = HEIGHT - BOTTOM

    @property
    def empty(self) -> bool:
        return all(line.total == 0 for line in self.lines)


def _nice_ceiling(value: float) -> float:
    """The next 1, 2 or 5 times a power of ten at or above value, so the axis reads round."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * magnitude >= value * (1 - 1e-9):
            return step * magnitude
    return 10 * magnitude


def _short(value: float, money: bool) -> str:
    if money:
        if value < 0.1:
            return f"${value:.3g}"
        return f"${value:,.2f}" if value < 1000 else f"${value / 1000:,.1f}k"
    for divisor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= divisor:
            return f"{value / divisor:g}{suffix}"
    return f"{value:g}"


def line_chart(
    title: str,
    buckets: list[dt.datetime],
    series: dict[str, list[float]],
    *,
    time_format: str = "%H:%M",
    money: bool = False,
) -> Chart:
    top = _nice_ceiling(max((max(values, default=0.0) for values in series.values()), default=0))
    span_x = (WIDTH - RIGHT - LEFT) / max(1, len(buckets) - 1)
    span_y = HEIGHT - BOTTOM - TOP
    lines = []
    for i, (name, values) in enumerate(series.items()):
        points = " ".join(
            f"{LEFT + j * span_x:.1f},{HEIGHT - BOTTOM - span_y * v / top:.1f}"
            for j, v in enumerate(values)
        )
        lines.append(Line(name, COLOURS[i % len(COLOURS)], points, sum(values)))
    marks = sorted({0, len(buckets) // 2, len(buckets) - 1}) if buckets else []
    # The ends are anchored inwards so their labels stay inside the drawing.
    anchors = {0: "start", len(buckets) - 1: "end"}
    x_labels = [
        (LEFT + j * span_x, anchors.get(j, "middle"), buckets[j].strftime(time_format))
        for j in marks
    ]
    return Chart(title, lines, _short(top, money), x_labels)
