"""Policies refuse what cannot be judged, saying what to fix, and share out the error budget."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evaluation.judge import DEFAULT_POLICY, Direction, Kind, MetricPolicy, Policy, ScheduledLook

LOWER = Direction.LOWER_IS_BETTER


def test_a_metric_must_measure_something_its_kind_can_measure() -> None:
    with pytest.raises(ValueError, match="a rate metric measures one of"):
        MetricPolicy("x", Kind.RATE, "ttft_ms", LOWER, 0.1)
    with pytest.raises(ValueError, match="is not a valid Kind"):
        MetricPolicy("x", "shift", "output_tokens", LOWER, 0.1)  # type: ignore[arg-type]


def test_quantile_metrics_need_a_quantile_and_others_must_not_have_one() -> None:
    with pytest.raises(ValueError, match="give quantile for quantile metrics only"):
        MetricPolicy("x", Kind.QUANTILE, "ttft_ms", LOWER, 0.1)
    with pytest.raises(ValueError, match="give quantile for quantile metrics only"):
        MetricPolicy("x", Kind.MEAN, "ttft_ms", LOWER, 0.1, quantile=0.5)
    with pytest.raises(ValueError, match=r"quantile must be in \(0, 1\)"):
        MetricPolicy("x", Kind.QUANTILE, "ttft_ms", LOWER, 0.1, quantile=1.0)


def test_margins_weights_and_sample_floors_must_be_positive() -> None:
    with pytest.raises(ValueError, match="margin must be positive"):
        MetricPolicy("x", Kind.MEAN, "cost", LOWER, 0.0)
    with pytest.raises(ValueError, match="min_samples must be at least 1"):
        MetricPolicy("x", Kind.MEAN, "cost", LOWER, 0.1, min_samples=0)
    with pytest.raises(ValueError, match="weight must be positive"):
        MetricPolicy("x", Kind.MEAN, "cost", LOWER, 0.1, weight=0)


def test_a_pass_margin_is_no_narrower_than_the_fail_margin() -> None:
    with pytest.raises(ValueError, match="pass_margin must be at least the margin"):
        MetricPolicy("x", Kind.MEAN, "cost", LOWER, 0.1, pass_margin=0.05)
    assert MetricPolicy("x", Kind.MEAN, "cost", LOWER, 0.1).passes_below == 0.1
    assert MetricPolicy("x", Kind.MEAN, "cost", LOWER, 0.1, pass_margin=0.2).passes_below == 0.2


def test_a_policy_needs_unique_metrics_and_sensible_alphas() -> None:
    metric = MetricPolicy("cost", Kind.MEAN, "cost", LOWER, 0.1)
    with pytest.raises(ValueError, match="metric names must be unique"):
        Policy(metrics=(metric, metric))
    with pytest.raises(ValueError, match="at least one metric"):
        Policy(metrics=())
    with pytest.raises(ValueError, match="alpha and pass_alpha must be in"):
        Policy(metrics=(metric,), alpha=0)
    for share in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"guardrail_share must be in \(0, 1\)"):
            Policy(metrics=(metric,), guardrail_share=share)


def test_the_rollouts_alpha_is_split_between_guardrails_and_the_judges_metrics_by_weight() -> None:
    policy = DEFAULT_POLICY
    assert policy.guardrail_alpha == pytest.approx(0.01 * 0.2)
    assert policy.judge_alpha == pytest.approx(0.01 * 0.8)
    assert sum(policy.alpha_of(m) for m in policy.metrics) == pytest.approx(policy.judge_alpha)
    total = sum(m.weight for m in policy.metrics)
    for metric in policy.metrics:
        assert policy.alpha_of(metric) == pytest.approx(policy.judge_alpha * metric.weight / total)
    alpha = {m.name: policy.alpha_of(m) for m in policy.metrics}
    assert alpha["ttft_p90"] > alpha["ttft_p50"] == alpha["ttft_p95"] > alpha["ttft_p99"]
    # The split is relative: doubling every weight changes nothing.
    doubled = Policy(metrics=tuple(replace(m, weight=2 * m.weight) for m in policy.metrics))
    assert all(
        doubled.alpha_of(d) == pytest.approx(policy.alpha_of(m))
        for d, m in zip(doubled.metrics, policy.metrics, strict=True)
    )


def test_the_default_metrics_ask_one_question_each() -> None:
    assert [m.name for m in DEFAULT_POLICY.metrics] == [
        "ttft_p50",
        "ttft_p90",
        "ttft_p95",
        "ttft_p99",
        "tpot_p50",
        "tpot_p95",
        "output_tokens_mean",
        "cost_per_mtok",
        "error_rate",
        "timeout_abort_rate",
        "truncation_rate",
        "tool_success_rate",
        "feedback_positive_rate",
    ]


def test_tail_quantiles_wait_for_enough_samples_beyond_them() -> None:
    floors = {m.name: m.min_samples for m in DEFAULT_POLICY.metrics}
    assert floors["ttft_p50"] == 200
    assert floors["ttft_p90"] == 500
    assert floors["ttft_p95"] == 1000
    assert floors["ttft_p99"] == 5000


def test_a_metrics_fail_alpha_splits_between_the_anytime_bound_and_the_scheduled_looks() -> None:
    metric = DEFAULT_POLICY.metrics[0]
    total = DEFAULT_POLICY.alpha_of(metric)
    spent = [DEFAULT_POLICY.fail_alphas(metric, ScheduledLook(i, 3)) for i in range(3)]
    anytime, per_look = spent[0][0], [look for _, look in spent]
    assert anytime + sum(per_look) == pytest.approx(total)
    assert anytime == pytest.approx(total * (1 - DEFAULT_POLICY.scheduled_share))
    # The default plan's 25% step, the second of three judged, gets half the scheduled share.
    assert per_look[1] == pytest.approx(2 * per_look[0]) == pytest.approx(2 * per_look[2])
    # A plan with another number of judged steps splits it evenly.
    four = [DEFAULT_POLICY.fail_alphas(metric, ScheduledLook(i, 4))[1] for i in range(4)]
    assert four == pytest.approx([total * DEFAULT_POLICY.scheduled_share / 4] * 4)
    # Without a schedule the scheduled share is not spent at all.
    assert DEFAULT_POLICY.fail_alphas(metric, None) == (anytime, 0.0)
    # The pass alpha is spent the same two ways, whole (every metric must pass: no split), and
    # evenly over the looks.
    anytime_pass, per_look_pass = DEFAULT_POLICY.pass_alphas(ScheduledLook(1, 3))
    assert anytime_pass + 3 * per_look_pass == pytest.approx(DEFAULT_POLICY.pass_alpha)
    assert DEFAULT_POLICY.pass_alphas(ScheduledLook(0, 3)) == (anytime_pass, per_look_pass)
    assert DEFAULT_POLICY.pass_alphas(None) == (anytime_pass, 0.0)
    with pytest.raises(ValueError, match="no such scheduled look"):
        ScheduledLook(3, 3)
    with pytest.raises(ValueError, match="scheduled_split must be positive shares"):
        Policy(metrics=DEFAULT_POLICY.metrics, scheduled_split=(0.5, 0.6))
    with pytest.raises(ValueError, match=r"scheduled_share must be in \[0, 1\)"):
        Policy(metrics=DEFAULT_POLICY.metrics, scheduled_share=1.0)
