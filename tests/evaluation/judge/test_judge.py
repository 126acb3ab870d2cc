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
    Direction,
    Kind,
    MetricPolicy,
    MetricVerdict,
    Outcome,
    Policy,
    Report,
    ScheduledLook,
    judge,
)
from tests.evaluation.judge.arms import make_arm

LOWER = Direction.LOWER_IS_BETTER


def default_metric(name: str) -> MetricPolicy:
    return next(m for m in DEFAULT_POLICY.metrics if m.name == name)


def assert_same(verdict: MetricVerdict, again: MetricVerdict) -> None:
    """The same verdict, its figures equal to the last few bits (the same sums, added in another
    order)."""
    fields, other = verdict.to_dict(), again.to_dict()
    fields["low"], fields["high"] = fields.pop("interval")
    other["low"], other["high"] = other.pop("interval")
    floats = {name for name, value in fields.items() if isinstance(value, float)}
    assert {name: other[name] for name in floats} == pytest.approx(
        {name: fields[name] for name in floats}, rel=1e-12
    )
    assert {name: other[name] for name in fields.keys() - floats} == {
        name: fields[name] for name in fields.keys() - floats
    }


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20)


def test_identical_arms_pass_every_metric_and_the_step(rng: np.random.Generator) -> None:
    baseline, candidate = make_arm(rng, 20_000, tools=0.5), make_arm(rng, 20_000, tools=0.5)
    report = judge(baseline, candidate, final=True)
    assert report.decision is Decision.PROMOTE
    assert report.reason == "every blocking metric with data passed (12 passed)"
    unpassed = [v.metric for v in report.verdicts if v.outcome is not Outcome.PASS]
    # Nobody sent feedback: that metric has no data and does not apply.
    assert unpassed == ["feedback_positive_rate"]
    assert report.verdict("feedback_positive_rate").rule == "no data in either arm"


def test_a_large_latency_regression_rolls_back_at_an_interim_look(
    rng: np.random.Generator,
) -> None:
    baseline = make_arm(rng, 6000, name="baseline")
    candidate = make_arm(rng, 1500, ttft_factor=1.5, name="canary")
    report = judge(baseline, candidate, final=False)
    assert report.decision is Decision.ROLLBACK
    verdict = report.verdict("ttft_p95")
    metric = default_metric("ttft_p95")
    assert verdict.outcome is Outcome.FAIL
    assert verdict.threshold == metric.margin
    assert verdict.interval[0] > verdict.threshold  # shown worse than the margin
    assert 0.3 < verdict.difference < 0.7
    assert verdict.rule.startswith(
        f"worse than the {metric.margin:.1%} fail margin beyond doubt: +"
    )
    assert verdict.alpha == DEFAULT_POLICY.alpha_of(metric)
    assert "ttft_p95" in report.reason
    assert report.verdict("tpot_p50").outcome is not Outcome.FAIL


def test_a_small_regression_within_the_margin_does_not_roll_back(
    rng: np.random.Generator,
) -> None:
    # 4% slower is real but under the 10% margin: never a rollback, however many samples.
    baseline, candidate = make_arm(rng, 40_000), make_arm(rng, 40_000, tpot_factor=1.04)
    report = judge(baseline, candidate, final=True)
    verdict = report.verdict("tpot_p50")
    assert verdict.interval[0] > 0  # the difference is beyond doubt…
    assert verdict.outcome is Outcome.PASS  # …and within the margin
    assert report.decision is not Decision.ROLLBACK


def test_a_candidate_worse_than_zero_but_inside_its_fail_margin_is_not_rolled_back(
    rng: np.random.Generator,
) -> None:
    # TTFT p50 5% worse, on samples enough to show it: worse beyond doubt, but not by the 10%
    # the margin allows, so no look rolls it back…
    baseline, candidate = make_arm(rng, 60_000), make_arm(rng, 60_000, ttft_factor=1.05)
    report = judge(baseline, candidate, final=False)
    verdict = report.verdict("ttft_p50")
    assert verdict.interval[0] > 0
    assert verdict.outcome is not Outcome.FAIL
    assert report.decision is Decision.CONTINUE
    # …while 30% worse is shown beyond the margin and rolled back.
    worse = make_arm(rng, 60_000, ttft_factor=1.30)
    rolled_back = judge(baseline, worse, final=False)
    assert rolled_back.verdict("ttft_p50").outcome is Outcome.FAIL
    assert rolled_back.verdict("ttft_p50").interval[0] > 0.10
    assert rolled_back.decision is Decision.ROLLBACK
    assert rolled_back.reason.startswith("worse beyond doubt and beyond the margin: ttft_p50, ")


def test_an_estimate_beyond_the_margin_is_no_rollback_until_shown_beyond_it(
    rng: np.random.Generator,
) -> None:
    # 9% slower on 3,000 requests: the estimate is past the 6% fail margin and the candidate is
    # worse beyond doubt, but it could still be within the margin: not settled either way.
    baseline, candidate = make_arm(rng, 3000), make_arm(rng, 3000, ttft_factor=1.09)
    report = judge(baseline, candidate, final=False)
    verdict = report.verdict("ttft_p50")
    assert verdict.difference > 0.06
    assert 0 < verdict.interval[0] < 0.06
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.rule.startswith("not settled: ")
    assert report.decision is Decision.CONTINUE


def test_a_candidate_exactly_at_its_pass_margin_does_not_pass_and_one_well_inside_does(
    rng: np.random.Generator,
) -> None:
    baseline = make_arm(rng, 20_000)

    def scaled(factor: float) -> ArmSamples:
        """The baseline's own requests, each exactly `factor` times as slow to the first token."""
        return replace(baseline, ttft_ms=baseline.ttft_ms * factor)

    # 10% worse, exactly the default pass margin: never a pass (here, beyond the 6% fail
    # margin too, it fails).
    at_margin = judge(baseline, scaled(1.10), final=True).verdict("ttft_p50")
    assert at_margin.difference == pytest.approx(0.10)
    assert at_margin.outcome is not Outcome.PASS
    assert at_margin.pass_bound > 0.10
    inside = judge(baseline, scaled(1.02), final=True).verdict("ttft_p50")
    assert inside.outcome is Outcome.PASS
    assert inside.pass_bound < 0.10
    assert inside.rule.startswith("within the 10.0% pass margin: +2.0% against the baseline")

    # A wider pass margin: the same 10% worse passes one of 20% (it is not shown worse than
    # its 10% fail margin)…
    wider = Policy(
        metrics=(
            MetricPolicy(
                "ttft_p50", Kind.QUANTILE, "ttft_ms", LOWER, 0.10, quantile=0.5, pass_margin=0.20
            ),
        )
    )
    at_fail_margin = judge(baseline, scaled(1.10), wider, final=True)
    verdict = at_fail_margin.verdict("ttft_p50")
    assert (verdict.threshold, verdict.pass_threshold) == (0.10, 0.20)
    assert verdict.outcome is Outcome.PASS
    assert verdict.rule.startswith("within the 20.0% pass margin: +10.0% against the baseline")
    assert at_fail_margin.decision is Decision.PROMOTE
    # …but a candidate exactly at that pass margin does not pass (it is shown worse than 10%).
    at_pass_margin = judge(baseline, scaled(1.20), wider, final=True).verdict("ttft_p50")
    assert at_pass_margin.pass_bound > 0.20
    assert at_pass_margin.outcome is Outcome.FAIL


def test_drift_shared_by_a_replicas_requests_does_not_roll_back_a_healthy_candidate() -> None:
    # The same model in both arms, on two replicas each, whose latency drifts together for
    # seconds at a time (sd 25%). In this draw the candidate's replicas happened to run slow.
    rng = np.random.default_rng(9)
    baseline = make_arm(rng, 12_000, name="b", replicas=2, per_s=100, drift=0.25)
    candidate = make_arm(rng, 12_000, name="c", replicas=2, per_s=100, drift=0.25)
    report = judge(baseline, candidate, final=False)
    assert report.verdict("ttft_p50").difference > 0.15
    assert report.decision is Decision.CONTINUE

    # Read as independent requests (each on a replica of its own), the same samples would
    # roll the candidate back: 24,000 requests are really 48 clusters' worth of evidence.
    def alone(arm: ArmSamples) -> ArmSamples:
        # Each request on a replica and in a window of its own.
        return replace(
            arm,
            replica=np.array([f"own-{i}" for i in range(len(arm))]),
            ts=np.asarray(
                1.7e9 + 60.0 * np.arange(len(arm)) + (arm is candidate) * 30.0, dtype=np.float64
            ),
        )

    as_independent = judge(alone(baseline), alone(candidate), final=False)
    assert as_independent.decision is Decision.ROLLBACK
    assert as_independent.verdict("ttft_p50").outcome is Outcome.FAIL


def test_each_metric_is_judged_at_its_weighted_share_of_the_judges_alpha(
    rng: np.random.Generator,
) -> None:
    report = judge(make_arm(rng, 6000, tools=0.5), make_arm(rng, 6000, tools=0.5), final=False)
    for metric in DEFAULT_POLICY.metrics:
        if metric.name != "feedback_positive_rate":  # no feedback: not judged
            assert report.verdict(metric.name).alpha == DEFAULT_POLICY.alpha_of(metric)
    assert report.alpha_per_metric == DEFAULT_POLICY.judge_alpha
    # Alpha follows the weights: a p95 weighs more than a p99, whose evidence is dearer.
    p95, p99 = default_metric("ttft_p95"), default_metric("ttft_p99")
    assert p95.weight > p99.weight
    ratio = report.verdict("ttft_p95").alpha / report.verdict("ttft_p99").alpha
    assert ratio == pytest.approx(p95.weight / p99.weight)
    # A larger share of alpha is a narrower interval on the same samples.
    p50 = replace(DEFAULT_POLICY.metrics[0], weight=1.0)
    alone_policy = Policy(metrics=(p50,))
    shared_policy = Policy(metrics=(p50, replace(p50, name="other", weight=9.0)))
    baseline, candidate = make_arm(rng, 3000), make_arm(rng, 3000)
    alone_interval = judge(baseline, candidate, alone_policy, final=False).verdict("ttft_p50")
    shared_interval = judge(baseline, candidate, shared_policy, final=False).verdict("ttft_p50")
    assert shared_interval.alpha == pytest.approx(alone_interval.alpha / 10)
    assert shared_interval.interval[0] < alone_interval.interval[0]
    assert shared_interval.interval[1] > alone_interval.interval[1]


def test_lower_tool_success_fails_in_the_higher_is_better_direction(
    rng: np.random.Generator,
) -> None:
    baseline = make_arm(rng, 20_000, tools=1.0, tool_invalid=0.05)
    candidate = make_arm(rng, 5000, tools=1.0, tool_invalid=0.15)
    verdict = judge(baseline, candidate, final=False).verdict("tool_success_rate")
    assert verdict.outcome is Outcome.FAIL
    assert verdict.difference == pytest.approx(-0.10, abs=0.02)
    assert verdict.threshold == -default_metric("tool_success_rate").margin


def test_too_few_samples_is_inconclusive_never_pass_or_fail(rng: np.random.Generator) -> None:
    baseline, candidate = make_arm(rng, 5000), make_arm(rng, 50, ttft_factor=3.0)
    report = judge(baseline, candidate, final=True)
    verdict = report.verdict("ttft_p50")
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert "too few samples: 200 per arm needed" in verdict.rule
    assert 0 < verdict.n_candidate <= 50
    assert report.decision is Decision.CONTINUE
    assert judge(baseline, candidate, final=True, last_step=True).decision is (Decision.HOLD)


def test_empty_arms_are_no_data_and_hold_at_the_end() -> None:
    report = judge(ArmSamples.empty(), ArmSamples.empty(), final=True)
    assert {v.outcome for v in report.verdicts} == {Outcome.INCONCLUSIVE}
    assert report.decision is Decision.HOLD
    assert report.reason.startswith("no data")
    interim = judge(ArmSamples.empty(), ArmSamples.empty(), final=False)
    assert interim.decision is Decision.CONTINUE


def test_an_arm_without_data_is_named(rng: np.random.Generator) -> None:
    verdict = judge(make_arm(rng, 500), ArmSamples.empty(), final=True).verdict("ttft_p50")
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
    report = judge(baseline, candidate, final=True)
    assert report.verdict("ttft_p50").n_candidate == 3000
    assert report.verdict("ttft_p50").outcome is Outcome.PASS
    assert report.verdict("output_tokens_mean").n_candidate == 4000


def test_clients_that_left_stay_out_of_latency_and_errors_and_count_as_aborts(
    rng: np.random.Generator,
) -> None:
    baseline, served = make_arm(rng, 4000), make_arm(rng, 4000)
    n = 1500
    # Clients that left, with absurd timings that would fail TTFT and 5xx statuses that would
    # fail the error rate, if they were counted there.
    left = make_arm(
        rng,
        n,
        ttft_factor=50,
        per_s=n / 80,  # spread over the served requests' 80 s
        status=np.where(np.arange(n) < n // 2, 499, 502),
        finish=np.full(n, "abort"),
    )
    report = judge(baseline, ArmSamples.concat(served, left), final=False)
    assert report.verdict("ttft_p95").outcome is not Outcome.FAIL
    assert report.verdict("ttft_p95").n_candidate == 4000
    # A 502 the client had already left is an abort, not the model's error.
    assert report.verdict("error_rate").n_candidate == 4000
    assert report.verdict("error_rate").outcome is not Outcome.FAIL
    # …and they are counted in their own rate, which does fail.
    assert report.verdict("timeout_abort_rate").n_candidate == 4000 + n
    assert report.verdict("timeout_abort_rate").outcome is Outcome.FAIL


def test_refused_requests_count_for_no_metric(rng: np.random.Generator) -> None:
    baseline, candidate = make_arm(rng, 4000, tools=0.5), make_arm(rng, 4000, tools=0.5)
    n = 8000
    # The gateway refused twice as many as it served (a tenant over budget), only in the
    # candidate's arm, and they carry values that would move every metric they counted in.
    refused = make_arm(
        rng,
        n,
        ttft_factor=50,
        tpot_factor=50,
        output_median=1000,
        start=float(candidate.ts[10]),  # within the candidate's time span
        per_s=1000,
        status=np.where(np.arange(n) % 2 == 0, 429, 503),  # over budget; shed
        finish=np.full(n, "rejected"),
        tool=np.full(n, "invalid_json"),
        replica=np.full(n, ""),  # no replica served them
    )
    report = judge(baseline, candidate, final=True)
    with_refusals = judge(baseline, ArmSamples.concat(candidate, refused), final=True)
    assert with_refusals.decision is report.decision
    for verdict, again in zip(report.verdicts, with_refusals.verdicts, strict=True):
        assert_same(verdict, again)
    assert report.verdict("error_rate").n_candidate == 4000
    assert report.verdict("timeout_abort_rate").n_candidate == 4000
    assert "rejection_rate" not in {v.metric for v in report.verdicts}


def test_a_control_arm_compares_latency_under_the_candidates_load(
    rng: np.random.Generator,
) -> None:
    # The busy baseline runs twice as slow as the lightly loaded arms; the candidate, a model
    # twice as slow on a light load, matches it: against the baseline it looks no worse…
    baseline = make_arm(rng, 20_000, name="baseline", ttft_factor=2.0)
    candidate = make_arm(rng, 1000, name="candidate", ttft_factor=2.0)
    alone = judge(baseline, candidate, final=False)
    assert alone.verdict("ttft_p95").outcome is not Outcome.FAIL
    assert alone.verdict("ttft_p95").reference == "baseline"
    # …while a control arm (the baseline's model at the candidate's weight) compares latency
    # like for like and catches it; other metrics pool the baseline with the control.
    control = make_arm(rng, 1000, name="control")
    with_control = judge(baseline, candidate, final=False, control=control)
    assert with_control.decision is Decision.ROLLBACK
    assert with_control.verdict("ttft_p95").outcome is Outcome.FAIL
    assert with_control.verdict("ttft_p95").reference == "control"
    assert with_control.verdict("ttft_p95").n_baseline == 1000
    assert with_control.verdict("error_rate").reference == "baseline+control"
    assert with_control.verdict("error_rate").n_baseline == 21_000


def test_heavy_tails_without_a_difference_do_not_fail(rng: np.random.Generator) -> None:
    def pareto_arm() -> ArmSamples:
        arm = make_arm(rng, 10_000)
        tail = (rng.pareto(1.5, 10_000) + 1) * 10
        return replace(arm, ttft_ms=tail, e2e_ms=tail * 20)

    report = judge(pareto_arm(), pareto_arm(), final=False)
    assert report.decision is Decision.CONTINUE


def test_interim_looks_never_promote(rng: np.random.Generator) -> None:
    report = judge(make_arm(rng, 20_000), make_arm(rng, 20_000), final=False)
    # A pass counts at the end of a step only.
    assert report.verdict("ttft_p50").outcome is Outcome.PASS
    assert report.decision is Decision.CONTINUE
    assert report.reason == "interim look: no metric is worse beyond doubt"


def test_report_round_trips_through_strict_json(rng: np.random.Generator) -> None:
    report = judge(make_arm(rng, 3000), make_arm(rng, 300), final=True)
    text = json.dumps(report.to_dict(), allow_nan=False)
    again = Report.from_dict(json.loads(text))
    assert again.decision is report.decision
    assert again.to_dict() == report.to_dict()
    assert again.verdict("ttft_p50").outcome is report.verdict("ttft_p50").outcome
    assert again.verdict("ttft_p50").pass_threshold == 0.10
    assert again.verdict("ttft_p50").alpha == DEFAULT_POLICY.alpha_of(DEFAULT_POLICY.metrics[0])


def _across_steps(
    rng: np.random.Generator, name: str, *, at_5: tuple[int, float], at_50: tuple[int, float]
) -> ArmSamples:
    """An arm's requests at the 5% step and then the 50% one, each with its own TTFT scale (the
    load the arm's replicas carried there, or the model's own speed)."""
    (n5, scale5), (n50, scale50) = at_5, at_50
    early = make_arm(rng, n5, name=name, ttft_factor=scale5, step=0, per_s=20)
    late = make_arm(rng, n50, name=name, ttft_factor=scale50, step=2, per_s=20, start=1.7e9 + 600)
    return ArmSamples.concat(early, late)


def test_without_a_control_arm_latencies_are_compared_where_the_loads_are_equal(
    rng: np.random.Generator,
) -> None:
    # At 5% the candidate's replicas idle (its TTFT 0.7 of the baseline's, which carries 95%);
    # at 50% the loads are equal and the candidate is 30% slower.
    baseline = _across_steps(rng, "v1", at_5=(6000, 1.0), at_50=(3000, 1.0))
    candidate = _across_steps(rng, "v2", at_5=(300, 0.7), at_50=(3000, 1.3))

    pooled = judge(baseline, candidate, final=False)
    at_equal_shares = judge(baseline, candidate, final=False, equal_share_steps=(2,))

    assert pooled.verdict("ttft_p50").outcome is not Outcome.FAIL
    verdict = at_equal_shares.verdict("ttft_p50")
    assert verdict.outcome is Outcome.FAIL
    assert (verdict.n_baseline, verdict.n_candidate) == (3000, 3000)
    assert at_equal_shares.decision is Decision.ROLLBACK
    # What no load changes still reads every step.
    assert at_equal_shares.verdict("error_rate").n_candidate == 3300


def test_before_the_50_percent_step_latencies_wait_for_it(rng: np.random.Generator) -> None:
    baseline = make_arm(rng, 6000, name="v1", step=0)
    candidate = make_arm(rng, 300, name="v2", step=0, ttft_factor=0.7)
    report = judge(baseline, candidate, final=True, equal_share_steps=(2,))
    verdict = report.verdict("ttft_p50")
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.rule.startswith("not compared at this share: without a control arm")
    assert report.decision is Decision.CONTINUE
    assert "ttft_p50" in report.reason
    # With a control arm at the candidate's share, the loads match at every step.
    control = make_arm(rng, 300, name="v1-control", step=0)
    with_control = judge(baseline, candidate, final=True, control=control, equal_share_steps=(2,))
    assert with_control.verdict("ttft_p50").n_candidate == 300


def test_a_steps_scheduled_look_reads_the_fixed_bound_and_other_looks_the_anytime_one() -> None:
    # 16% slower on 3,000 requests: shown beyond the 6% fail margin by the fixed bound at the 25%
    # step's half of the scheduled share, not by the anytime-valid one at the rest of the alpha.
    rng = np.random.default_rng(11)
    baseline = make_arm(rng, 3000, name="baseline")
    candidate = make_arm(rng, 3000, ttft_factor=1.16, name="canary")
    unscheduled = judge(baseline, candidate, final=True)
    scheduled = judge(baseline, candidate, final=True, scheduled=ScheduledLook(1, 3))
    assert unscheduled.verdict("ttft_p50").outcome is Outcome.INCONCLUSIVE
    assert not unscheduled.scheduled
    verdict = scheduled.verdict("ttft_p50")
    assert (verdict.outcome, scheduled.decision, scheduled.scheduled) == (
        Outcome.FAIL,
        Decision.ROLLBACK,
        True,
    )
    assert "the scheduled look of judged step 2 of 3, alpha 0.00023 of its 0.00062" in verdict.rule
    # The pass side is spent the same way: the scheduled look reads the narrower fixed bound.
    assert verdict.pass_bound < unscheduled.verdict("ttft_p50").pass_bound
    # Spread over more looks, each gets less: a wider bound.
    ten = judge(baseline, candidate, final=True, scheduled=ScheduledLook(0, 10)).verdict("ttft_p50")
    assert unscheduled.verdict("ttft_p50").interval[0] < ten.interval[0] < verdict.interval[0]
    again = Report.from_dict(json.loads(json.dumps(scheduled.to_dict(), allow_nan=False)))
    assert again.scheduled


def test_latencies_are_compared_adjusted_for_the_prompts_the_gateway_estimated() -> None:
    # TTFT that is mostly prefill: the prompt's size explains much of its spread. With the
    # gateway's estimates recorded, the judge compares like prompts with like and says so; the
    # same requests without them (an older gateway's records) are compared as they are.
    rng = np.random.default_rng(41)

    def arm(name: str, factor: float) -> ArmSamples:
        base = make_arm(rng, 4000, name=name)
        size = np.round(rng.lognormal(np.log(400), 1.0, len(base))).astype(np.int64) + 1
        ttft = factor * (2 + 0.05 * size) * rng.lognormal(0, 0.3, len(base))
        columns = {column: getattr(base, column) for column in ("status", "finish", "tpot_ms")}
        columns |= {c: getattr(base, c) for c in ("e2e_ms", "output_tokens", "tool", "cost")}
        columns |= {c: getattr(base, c) for c in ("ts", "replica", "step", "prompt_tokens")}
        return ArmSamples.from_columns(columns | {"ttft_ms": ttft, "prompt_estimate": size})

    def unknown(samples: ArmSamples) -> ArmSamples:
        return replace(samples, prompt_estimate=np.zeros(len(samples), dtype=np.int64))

    baseline, candidate = arm("baseline", 1.0), arm("canary", 1.15)
    policy = Policy(metrics=(default_metric("ttft_p90"),))
    with_sizes = judge(baseline, candidate, policy, final=True).verdicts[0]
    without = judge(unknown(baseline), unknown(candidate), policy, final=True).verdicts[0]
    assert "adjusted for prompt size" in with_sizes.rule
    assert "adjusted" not in without.rule
    width = with_sizes.interval[1] - with_sizes.interval[0]
    assert width < 0.8 * (without.interval[1] - without.interval[0])
    assert with_sizes.interval[0] < 0.15 < with_sizes.interval[1]


def test_a_step_passes_at_its_scheduled_look_on_evidence_the_anytime_bound_would_not_take() -> None:
    rng = np.random.default_rng(12)
    baseline = make_arm(rng, 200, name="baseline", drift=0.05)
    candidate = make_arm(rng, 200, name="canary", drift=0.05)
    policy = Policy(metrics=(default_metric("tpot_p50"),))
    anytime = judge(baseline, candidate, policy, final=True).verdicts[0]
    look = ScheduledLook(0, 3)
    scheduled = judge(baseline, candidate, policy, final=True, scheduled=look).verdicts[0]
    assert (anytime.outcome, scheduled.outcome) == (Outcome.INCONCLUSIVE, Outcome.PASS)
    assert "the scheduled look of judged step 1 of 3, alpha 0.013 of its 0.05" in scheduled.rule


def with_replica_tpot(arm: ArmSamples, factors: list[float]) -> ArmSamples:
    """The arm with each replica's TPOT scaled by its own factor (a host slower between tokens)."""
    index = np.array([int(name.rsplit("-", 1)[1]) for name in arm.replica.tolist()])
    return replace(arm, tpot_ms=arm.tpot_ms * np.array(factors)[index])


def test_replicas_whose_tpot_differs_have_their_ttft_read_with_few_degrees_of_freedom() -> None:
    # Four replicas an arm, the same model. Where the replicas' TPOT differs beyond chance, a
    # TTFT quantile's replica level is taken as there too (a host slow between tokens is slow to
    # a first token as well), even where its own sample of it came out small: its fail bound is
    # read with the few replicas' degrees of freedom, wider on the very same TTFT samples.
    rng = np.random.default_rng(24)
    factors = [0.85, 0.95, 1.05, 1.15]
    for _ in range(5):
        baseline = make_arm(rng, 4000, name="baseline", per_s=10)
        candidate = make_arm(rng, 4000, name="canary", per_s=10)
        alike = judge(baseline, candidate, final=False).verdict("ttft_p50")
        apart = judge(
            with_replica_tpot(baseline, factors),
            with_replica_tpot(candidate, factors[::-1]),
            final=False,
        )
        assert apart.set_aside == ()
        ttft = apart.verdict("ttft_p50")
        assert ttft.difference == alike.difference
        width = ttft.interval[1] - ttft.interval[0]
        assert width > 1.8 * (alike.interval[1] - alike.interval[0])


def test_a_replica_set_aside_has_the_others_read_as_the_unit() -> None:
    # A candidate replica 50% slower is set aside; its three siblings may then agree, but a
    # fleet with one odd host is no fleet of alike replicas: the latencies left are read with the
    # replicas' few degrees of freedom, wider than the same samples would be on their own.
    rng = np.random.default_rng(26)
    baseline = make_arm(rng, 4000, name="baseline", per_s=10)
    candidate = make_arm(rng, 4000, name="canary", per_s=10)
    slow = candidate.replica == "canary-0"
    with_slow_host = replace(
        candidate,
        ttft_ms=np.where(slow, candidate.ttft_ms * 1.5, candidate.ttft_ms),
        tpot_ms=np.where(slow, candidate.tpot_ms * 1.5, candidate.tpot_ms),
    )
    report = judge(baseline, with_slow_host, final=False)
    assert len(report.set_aside) == 1
    assert "canary-0" in report.set_aside[0]
    on_their_own = judge(baseline, candidate.take(~slow), final=False)
    assert on_their_own.set_aside == ()
    for metric in ("ttft_p50", "tpot_p50"):
        aside, alone = report.verdict(metric), on_their_own.verdict(metric)
        assert aside.difference == pytest.approx(alone.difference)
        width = aside.interval[1] - aside.interval[0]
        assert width > 1.8 * (alone.interval[1] - alone.interval[0])
