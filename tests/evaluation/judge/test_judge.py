"""The judge on synthetic arms with known answers."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from evaluation.judge import (
    DEFAULT_POLICY,
    ArmSamples,
    Decision,
    Outcome,
    Policy,
    Report,
    judge,
)
from tests.evaluation.judge.arms import make_arm


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20)


def test_identical_arms_pass_every_metric_and_the_step(rng: np.random.Generator) -> None:
    baseline, candidate = make_arm(rng, 20_000, tools=0.5), make_arm(rng, 20_000, tools=0.5)
    report = judge(baseline, candidate, final=True, steps=3)
    assert report.decision is Decision.PROMOTE
    outcomes = {v.metric: v.outcome for v in report.verdicts}
    assert outcomes["ttft_p95"] is Outcome.PASS
    assert outcomes["tool_success_rate"] is Outcome.PASS
    # Nobody sent feedback: that metric has no data and does not apply.
    assert report.verdict("feedback_positive_rate").rule == "no data in either arm"


def test_a_large_latency_regression_rolls_back_at_an_interim_look(
    rng: np.random.Generator,
) -> None:
    baseline, candidate = make_arm(rng, 6000), make_arm(rng, 1500, ttft_factor=1.5)
    report = judge(baseline, candidate, final=False, steps=3)
    assert report.decision is Decision.ROLLBACK
    verdict = report.verdict("ttft_p95")
    assert verdict.outcome is Outcome.FAIL
    assert verdict.interval[0] > 0
    assert 0.3 < verdict.difference < 0.7
    assert verdict.threshold == 0.10
    assert "ttft_p95" in report.reason
    assert report.verdict("tpot_p50").outcome is not Outcome.FAIL


def test_a_small_regression_within_the_margin_does_not_roll_back(
    rng: np.random.Generator,
) -> None:
    # 4% slower is real but under the 10% margin: never a rollback, however many samples.
    baseline, candidate = make_arm(rng, 40_000), make_arm(rng, 40_000, tpot_factor=1.04)
    report = judge(baseline, candidate, final=True, steps=3)
    verdict = report.verdict("tpot_p50")
    assert verdict.interval[0] > 0  # the difference is beyond doubt…
    assert verdict.outcome is Outcome.PASS  # …and within the margin
    assert report.decision is not Decision.ROLLBACK


def test_lower_tool_success_fails_in_the_higher_is_better_direction(
    rng: np.random.Generator,
) -> None:
    baseline = make_arm(rng, 20_000, tools=1.0, tool_invalid=0.05)
    candidate = make_arm(rng, 5000, tools=1.0, tool_invalid=0.15)
    verdict = judge(baseline, candidate, final=False, steps=3).verdict("tool_success_rate")
    assert verdict.outcome is Outcome.FAIL
    assert verdict.difference == pytest.approx(-0.10, abs=0.02)
    assert verdict.threshold == -0.03


def test_too_few_samples_is_inconclusive_never_pass_or_fail(rng: np.random.Generator) -> None:
    baseline, candidate = make_arm(rng, 5000), make_arm(rng, 50, ttft_factor=3.0)
    report = judge(baseline, candidate, final=True, steps=3)
    verdict = report.verdict("ttft_p50")
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert "too few samples: 200 per arm needed" in verdict.rule
    assert 0 < verdict.n_candidate <= 50
    assert report.decision is Decision.CONTINUE
    assert judge(baseline, candidate, final=True, steps=3, last_step=True).decision is (
        Decision.HOLD
    )


def test_empty_arms_are_no_data_and_hold_at_the_end() -> None:
    report = judge(ArmSamples.empty(), ArmSamples.empty(), final=True, steps=3)
    assert {v.outcome for v in report.verdicts} == {Outcome.INCONCLUSIVE}
    assert report.decision is Decision.HOLD
    assert report.reason.startswith("no data")
    interim = judge(ArmSamples.empty(), ArmSamples.empty(), final=False, steps=3)
    assert interim.decision is Decision.CONTINUE


def test_an_arm_without_data_is_named(rng: np.random.Generator) -> None:
    verdict = judge(make_arm(rng, 500), ArmSamples.empty(), final=True, steps=3).verdict("ttft_p50")
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.rule == "no data in the candidate"


def test_nan_timings_drop_out_of_latency_but_count_as_requests(
    rng: np.random.Generator,
) -> None:
    baseline = make_arm(rng, 4000)
    candidate = make_arm(rng, 4000)
    no_token = np.zeros(4000, dtype=bool)
    no_token[::4] = True
    candidate = replace(
        candidate,
        ttft_ms=np.where(no_token, np.nan, candidate.ttft_ms),
        tpot_ms=np.where(no_token, np.nan, candidate.tpot_ms),
    )
    report = judge(baseline, candidate, final=True, steps=3)
    assert report.verdict("ttft_p50").n_candidate == 3000
    assert report.verdict("ttft_p50").outcome is Outcome.PASS
    assert report.verdict("output_tokens_mean").n_candidate == 4000


def test_refusals_and_clients_that_left_stay_out_of_latency_and_errors(
    rng: np.random.Generator,
) -> None:
    baseline, served = make_arm(rng, 4000), make_arm(rng, 4000)
    n = 3000
    # Refused requests and clients that left, with absurd timings that would fail TTFT and
    # e2e, and 5xx statuses that would fail the error rate, if they were counted there.
    noise = make_arm(
        rng,
        n,
        ttft_factor=50,
        status=np.where(np.arange(n) < n // 2, 429, 499),
        finish=np.where(np.arange(n) < n // 2, "rejected", "abort"),
    )
    candidate = ArmSamples.concat(served, noise)
    report = judge(baseline, candidate, final=False, steps=3)
    assert report.verdict("ttft_p95").outcome is not Outcome.FAIL
    assert report.verdict("ttft_p95").n_candidate == 4000
    assert report.verdict("error_rate").n_candidate == 4000
    assert report.verdict("error_rate").outcome is not Outcome.FAIL
    # …and they are counted in their own rates, which do fail.
    assert report.verdict("rejection_rate").outcome is Outcome.FAIL
    assert report.verdict("timeout_abort_rate").n_candidate == 4000 + n // 2
    assert report.verdict("timeout_abort_rate").outcome is Outcome.FAIL


def test_concurrency_strata_remove_a_pure_load_effect(rng: np.random.Generator) -> None:
    # The same model: latency grows 10% per request in flight. The candidate runs busier
    # (2 to 9 in flight) than the baseline (0 to 6): unadjusted it looks 25% slower.
    baseline = make_arm(rng, 20_000, concurrency=rng.integers(0, 7, 20_000), load_slowdown=0.1)
    candidate = make_arm(rng, 8000, concurrency=rng.integers(2, 10, 8000), load_slowdown=0.1)
    adjusted = judge(baseline, candidate, final=False, steps=3)
    assert adjusted.decision is Decision.CONTINUE
    assert abs(adjusted.verdict("tpot_p50").difference) < 0.03
    unadjusted_policy = Policy(
        metrics=tuple(replace(m, load_sensitive=False) for m in DEFAULT_POLICY.metrics)
    )
    unadjusted = judge(baseline, candidate, unadjusted_policy, final=False, steps=3)
    assert unadjusted.decision is Decision.ROLLBACK
    assert unadjusted.verdict("tpot_p50").outcome is Outcome.FAIL


def test_arms_at_loads_too_far_apart_need_a_control_arm(rng: np.random.Generator) -> None:
    # A 5% canary on its own replicas: 0-1 in flight against the baseline's 20-30. No stratum
    # holds both, so latency cannot be compared to the baseline at all…
    baseline = make_arm(rng, 20_000, concurrency=rng.integers(20, 31, 20_000), load_slowdown=0.1)
    candidate = make_arm(
        rng, 1000, ttft_factor=1.5, concurrency=rng.integers(0, 2, 1000), load_slowdown=0.1
    )
    alone = judge(baseline, candidate, final=True, steps=3)
    verdict = alone.verdict("ttft_p95")
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert "different loads" in verdict.rule
    # …while a control arm (the baseline's model at the canary's weight) compares like for like
    # and catches the 50% slower TTFT that the lighter load hid.
    control = make_arm(rng, 1000, concurrency=rng.integers(0, 2, 1000), load_slowdown=0.1)
    with_control = judge(baseline, candidate, final=False, steps=3, control=control)
    assert with_control.verdict("ttft_p95").outcome is Outcome.FAIL
    assert with_control.verdict("ttft_p95").reference == "control"
    assert with_control.verdict("error_rate").reference == "baseline+control"
    assert with_control.verdict("error_rate").n_baseline == 21_000


def test_heavy_tails_without_a_difference_do_not_fail(rng: np.random.Generator) -> None:
    def pareto_arm() -> ArmSamples:
        arm = make_arm(rng, 10_000)
        tail = (rng.pareto(1.5, 10_000) + 1) * 10
        return replace(arm, ttft_ms=tail, e2e_ms=tail * 20)

    report = judge(pareto_arm(), pareto_arm(), final=False, steps=3)
    assert report.decision is Decision.CONTINUE


def test_interim_looks_never_promote(rng: np.random.Generator) -> None:
    report = judge(make_arm(rng, 20_000), make_arm(rng, 20_000), final=False, steps=3)
    assert report.decision is Decision.CONTINUE
    assert "provisional" in report.verdict("ttft_p50").rule


def test_report_round_trips_through_strict_json(rng: np.random.Generator) -> None:
    report = judge(make_arm(rng, 3000), make_arm(rng, 100), final=True, steps=3)
    text = json.dumps(report.to_dict(), allow_nan=False)
    again = Report.from_dict(json.loads(text))
    assert again.decision is report.decision
    assert again.to_dict() == report.to_dict()
    assert again.verdict("ttft_p50").outcome is report.verdict("ttft_p50").outcome


def test_steps_must_be_counted(rng: np.random.Generator) -> None:
    with pytest.raises(ValueError, match="steps must be at least 1"):
        judge(make_arm(rng, 10), make_arm(rng, 10), final=False, steps=0)
