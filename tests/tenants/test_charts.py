"""The inline SVG charts: round axes and points placed inside the plot."""

from __future__ import annotations

import datetime as dt

import pytest

from tenants import charts

START = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
BUCKETS = [START + dt.timedelta(hours=h) for h in range(24)]


@pytest.mark.parametrize(
    ("value", "axis"),
    [(0, 1.0), (0.37, 0.5), (0.012, 0.02), (7, 10), (10, 10), (11, 20), (4200, 5000)],
)
def test_the_axis_top_is_the_next_round_value(value: float, axis: float) -> None:
    assert charts._nice_ceiling(value) == pytest.approx(axis)


def test_points_span_the_plot_from_zero_to_the_axis_top() -> None:
    values = [0.0] * 23 + [50.0]
    chart = charts.line_chart("Tokens", BUCKETS, {"in": values, "out": [0.0] * 24})
    points = [tuple(map(float, p.split(","))) for p in chart.lines[0].points.split()]
    assert points[0] == (chart.plot_left, chart.plot_bottom)
    assert points[-1][0] == pytest.approx(chart.plot_right)
    assert points[-1][1] == chart.plot_top
    assert chart.y_max == "50"
    assert [anchor for _, anchor, _ in chart.x_labels] == ["start", "middle", "end"]
    assert [label for _, _, label in chart.x_labels] == ["00:00", "12:00", "23:00"]
    assert not chart.empty


def test_a_chart_with_nothing_says_so_and_money_reads_as_dollars() -> None:
    chart = charts.line_chart("Cost", BUCKETS, {"dollars": [0.0] * 24}, money=True)
    assert chart.empty
    assert chart.y_max == "$1.00"
    busy = charts.line_chart("Cost", BUCKETS, {"dollars": [0.01] * 24}, money=True)
    assert busy.y_max == "$0.01"
