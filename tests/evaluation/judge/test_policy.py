"""Policies refuse what cannot be judged, saying what to fix."""

from __future__ import annotations

import pytest

from evaluation.judge import DEFAULT_POLICY, Direction, Kind, MetricPolicy, Policy

LOWER = Direction.LOWER_IS_BETTER


def test_a_metric_must_measure_something_its_kind_can_measure() -> None:
    with pytest.raises(ValueError, match="a rate metric measures one of"):
        MetricPolicy("x", Kind.RATE, "ttft_ms", LOWER, 0.1)


def test_quantile_metrics_need_a_quantile_and_others_must_not_have_one() -> None:
    with pytest.raises(ValueError, match="give quantile for quantile metrics only"):
        MetricPolicy("x", Kind.QUANTILE, "ttft_ms", LOWER, 0.1)
    with pytest.raises(ValueError, match="give quantile for quantile metrics only"):
        MetricPolicy("x", Kind.MEAN, "ttft_ms", LOWER, 0.1, quantile=0.5)
    with pytest.raises(ValueError, match=r"quantile must be in \(0, 1\)"):
        MetricPolicy("x", Kind.QUANTILE, "ttft_ms", LOWER, 0.1, quantile=1.0)


def test_margins_and_sample_floors_must_be_positive() -> None:
    with pytest.raises(ValueError, match="margin must be positive"):
        MetricPolicy("x", Kind.MEAN, "cost", LOWER, 0.0)
    with pytest.raises(ValueError, match="min_samples must be at least 1"):
        MetricPolicy("x", Kind.MEAN, "cost", LOWER, 0.1, min_samples=0)


def test_a_policy_needs_unique_metrics_and_sensible_alphas() -> None:
    metric = MetricPolicy("cost", Kind.MEAN, "cost", LOWER, 0.1)
    with pytest.raises(ValueError, match="metric names must be unique"):
        Policy(metrics=(metric, metric))
    with pytest.raises(ValueError, match="at least one metric"):
        Policy(metrics=())
    with pytest.raises(ValueError, match="alpha and pass_alpha must be in"):
        Policy(metrics=(metric,), alpha=0)


def test_alpha_is_shared_over_steps_and_metrics() -> None:
    metrics = len(DEFAULT_POLICY.metrics)
    assert DEFAULT_POLICY.alpha_per_metric(3) == pytest.approx(0.01 / 3 / metrics)


def test_tail_quantiles_wait_for_enough_samples_beyond_them() -> None:
    floors = {m.name: m.min_samples for m in DEFAULT_POLICY.metrics}
    assert floors["ttft_p50"] == 200
    assert floors["ttft_p95"] == 1000
    assert floors["ttft_p99"] == 5000
