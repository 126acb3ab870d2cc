"""The report's charts as geometry for inline SVG (drawn by the template, no JavaScript): latency
CDFs per arm, p95 over time per arm, output-token histograms, cost per arm."""

from __future__ import annotations

from dataclasses import dataclass, field

from evaluation.report import CDF_QS, Report

WIDTH, HEIGHT = 360, 180
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 10, 30


@dataclass(frozen=True)
class Line:
    arm: str
    points: str  # "x,y x,y ..." for <polyline>


@dataclass(frozen=True)
class Bar:
    arm: str
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    lines: list[Line] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def empty(self) -> bool:
        return not self.lines and not self.bars

    @property
    def plot_left(self) -> int:
        return LEFT

    @property
    def plot_bottom(self) -> int:
        return HEIGHT - BOTTOM

    @property
    def plot_right(self) -> int:
        return WIDTH - RIGHT


def _x(value: float, top: float) -> float:
    return round(LEFT + (WIDTH - LEFT - RIGHT) * (value / top if top else 0), 1)


def _y(value: float, top: float) -> float:
    return round(HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * (value / top if top else 0), 1)


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def _ticks(top: float, place: str) -> list[tuple[float, str]]:
    marks = [top * i / 4 for i in range(5)]
    at = _x if place == "x" else _y
    return [(at(m, top), _fmt(m)) for m in marks]


def cdf(report: Report, signal: str, title: str) -> Chart:
    chart = Chart(title, f"{title} (ms)", "share of requests")
    curves = {
        arm: [(row.q(signal, q), q) for q in CDF_QS if row.q(signal, q) is not None]
        for arm, row in report.arms.items()
    }
    top = max((v for points in curves.values() for v, _ in points if v is not None), default=0.0)
    if not top:
        return chart
    for arm, points in curves.items():
        if points:
            chart.lines.append(
                Line(arm, " ".join(f"{_x(v or 0, top)},{_y(q, 1)}" for v, q in points))
            )
    chart.x_ticks, chart.y_ticks = _ticks(top, "x"), _ticks(1.0, "y")
    return chart


def over_time(report: Report, index: int, title: str) -> Chart:
    """p95 per time bucket; `index` picks TTFT (1) or TPOT (2) in the series tuples."""
    chart = Chart(title, "seconds into the step", "ms")
    points = {
        arm: [(s[0], s[index]) for s in series if s[index] is not None]
        for arm, series in report.series.items()
    }
    times = [t for series in points.values() for t, _ in series]
    if not times:
        return chart
    start, span = min(times), (max(times) - min(times)) or 1.0
    top = max(float(v or 0) for series in points.values() for _, v in series) or 1.0
    for arm, series in points.items():
        if series:
            chart.lines.append(
                Line(
                    arm,
                    " ".join(f"{_x(t - start, span)},{_y(float(v or 0), top)}" for t, v in series),
                )
            )
    chart.x_ticks, chart.y_ticks = _ticks(span, "x"), _ticks(top, "y")
    return chart


def histogram(report: Report) -> Chart:
    chart = Chart("Output tokens per request", "output tokens", "share of requests")
    shares: dict[str, list[float]] = {}
    for arm, counts in report.histogram.items():
        total = sum(counts)
        if total:
            shares[arm] = [c / total for c in counts]
    if not shares:
        return chart
    top = max(max(v) for v in shares.values()) or 1.0
    bins = len(next(iter(report.histogram.values())))
    slot = (WIDTH - LEFT - RIGHT) / bins
    for offset, (arm, values) in enumerate(sorted(shares.items())):
        for index, share in enumerate(values):
            y = _y(share, top)
            low = index * report.histogram_width
            chart.bars.append(
                Bar(
                    arm,
                    round(LEFT + index * slot + offset * slot / 2, 1),
                    y,
                    round(slot / 2 - 1, 1),
                    round(HEIGHT - BOTTOM - y, 1),
                    f"{arm}: {share:.1%} of requests with {low}-{low + report.histogram_width - 1}"
                    " output tokens",
                )
            )
    chart.x_ticks = [
        (round(LEFT + i * slot, 1), str(i * report.histogram_width))
        for i in range(0, bins + 1, max(1, bins // 4))
    ]
    chart.y_ticks = _ticks(top, "y")
    return chart


def cost(report: Report) -> Chart:
    chart = Chart("Cost per million output tokens", "arm", "$")
    values = {
        arm: row.cost_per_mtok for arm, row in report.arms.items() if row.cost_per_mtok is not None
    }
    if not values:
        return chart
    top = max(values.values()) or 1.0
    slot = (WIDTH - LEFT - RIGHT) / 2
    for index, (arm, value) in enumerate(sorted(values.items())):
        y = _y(value, top)
        chart.bars.append(
            Bar(
                arm,
                round(LEFT + index * slot + slot * 0.2, 1),
                y,
                round(slot * 0.6, 1),
                round(HEIGHT - BOTTOM - y, 1),
                f"{arm}: ${value:.4g} per million output tokens",
            )
        )
        chart.x_ticks.append((round(LEFT + index * slot + slot / 2, 1), arm))
    chart.y_ticks = _ticks(top, "y")
    return chart


def all_charts(report: Report) -> list[Chart]:
    return [
        cdf(report, "ttft_ms", "TTFT"),
        cdf(report, "e2e_ms", "End-to-end latency"),
        over_time(report, 1, "TTFT p95 over time"),
        over_time(report, 2, "TPOT p95 over time"),
        histogram(report),
        cost(report),
    ]
