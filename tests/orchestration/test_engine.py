"""Tick decisions on real samples: guardrails roll back on a breach beyond doubt, steps move when
baked; and the decision's pure core on samples in memory."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable

import numpy as np
import pytest
import redis
from django.utils import timezone

from evaluation.judge import (
    DEFAULT_POLICY,
    TOO_FEW_SAMPLES,
    ArmSamples,
    Decision,
    MetricVerdict,
    Outcome,
    Policy,
    Report,
)
from orchestration.engine import TickState, advance, decide, decide_on
from rollouts.choices import RolloutState
from rollouts.models import Rollout, RolloutEvent
from rollouts.plans import Plan, SloGates, Step
from tests.conftest import stored
from tests.evaluation.judge.arms import make_arm
from tests.evaluation.test_judging import traffic

S = RolloutState


def later(seconds: float) -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=seconds)


def test_it_holds_while_the_step_bakes(running: Rollout) -> None:
    stored(running, "canary", 60, short=True)
    stored(running, "baseline", 60, short=True)
    assert decide(running).action == "hold"


def test_one_error_in_20_requests_against_a_5_percent_limit_does_not_roll_back(
    running: Rollout,
) -> None:
    stored(running, "canary", 19, short=True)
    stored(running, "canary", 1, short=True, status=500)
    decision = decide(running)
    assert decision.action == "hold", decision.reason
    errors = next(test for test in decision.guardrails if test.name == "error rate")
    assert (errors.events, errors.trials, errors.breached) == (1, 20, False)
    # Nor do a few more: 4 of 22 (18%) is over the limit, but not yet beyond doubt.
    stored(running, "canary", 3, short=True, status=500)
    stored(running, "canary", 2, short=True)
    assert decide(running).action == "hold"


def test_an_error_rate_clearly_over_the_guardrail_rolls_back_before_the_step_ends(
    running: Rollout,
) -> None:
    stored(running, "canary", 7, short=True)
    stored(running, "canary", 15, short=True, status=500)  # 68% of 22 against 5%
    decision = advance(running.pk)
    assert decision is not None
    assert decision.action == "rollback"
    assert decision.reason.startswith(
        "error rate 68.2% (15 of 22) is above its 5.0% limit beyond doubt (evidence "
    )
    running.refresh_from_db()
    assert running.state == S.ROLLED_BACK
    event = RolloutEvent.objects.get(to_state=S.ROLLED_BACK)
    assert event.evidence["canary"]["errors"] == 15
    assert event.reason == decision.reason


def test_the_evidence_of_a_breach_grows_with_every_error(running: Rollout) -> None:
    stored(running, "canary", 20, short=True)
    evidence = []
    for _ in range(8):
        errors = next(t for t in decide(running).guardrails if t.name == "error rate")
        evidence.append(errors.log_evidence)
        stored(running, "canary", 1, short=True, status=500)
    assert evidence == sorted(evidence)
    assert len(set(evidence)) == len(evidence)


def test_too_few_samples_never_condemn_a_candidate(running: Rollout) -> None:
    # 15 errors in 15 requests is beyond doubt, but under the 20 samples the gates ask for.
    stored(running, "canary", 15, short=True, status=500)
    decision = decide(running)
    assert decision.action == "hold"
    assert any(test.breached for test in decision.guardrails)


def test_a_hard_ttft_breach_rolls_back(running: Rollout) -> None:
    stored(running, "canary", 30, short=True, ttft_ms=900)
    decision = decide(running)
    assert decision.action == "rollback"
    assert decision.reason.startswith("TTFT p95 over 300 ms")
    assert "100.0% (30 of 30) is above its 5.0% limit beyond doubt" in decision.reason


def test_client_disconnects_count_neither_as_requests_nor_against_the_gates(
    running: Rollout,
) -> None:
    stored(running, "canary", 30, short=True)
    # Clients that gave up on a slow first token: over the TTFT gate, were they counted.
    stored(running, "canary", 30, short=True, status=499, ttft_ms=900)
    decision = decide(running)
    assert decision.action == "hold", decision.reason
    assert decision.evidence["canary"] == {
        "samples": 30,
        "errors": 0,
        "timeouts": 0,
        "ttft_p95_ms": 50.0,
        "tpot_p95_ms": 5.0,
    }


def test_the_guardrails_read_the_current_steps_samples_alone(running: Rollout) -> None:
    # Two judged steps; the first held 2,000 healthy candidate requests.
    plan = Plan(
        steps=(Step(weight=5, min_bake_s=30, min_samples=50), Step(weight=50), Step(weight=100))
    )
    Rollout.objects.filter(pk=running.pk).update(plan=plan.model_dump(mode="json"))
    stored(running, "canary", 2000, short=True, step=0)
    Rollout.objects.filter(pk=running.pk).update(step_index=1, step_started_at=timezone.now())
    running.refresh_from_db()
    # 15 errors in the second step's 22 requests: diluted in 2,022 they would be 0.7%.
    stored(running, "canary", 7, short=True)
    stored(running, "canary", 15, short=True, status=500)
    decision = decide(running)
    assert decision.action == "rollback"
    assert decision.reason.startswith("error rate 68.2% (15 of 22)")


def test_a_baked_step_waits_for_the_samples_the_judge_needs_then_moves_on(
    running: Rollout,
) -> None:
    # An equal candidate, with the spread real latencies have.
    traffic(running, "canary", 60, seed=5)
    traffic(running, "baseline", 60, seed=6)
    waiting = decide(running, now=later(31))
    assert waiting.action == "hold"
    assert waiting.reason.startswith("the A/B judge waits for samples for ttft_p50")
    traffic(running, "canary", 3000, seed=7)
    traffic(running, "baseline", 3000, seed=8)
    decision = decide(running, now=later(31))
    assert decision.action == "advance", decision.reason
    assert "the A/B judge: every blocking metric with data passed" in decision.reason
    judge = dict(decision.evidence["judge"])  # type: ignore[call-overload]
    assert judge.pop("summary").startswith("promote (final look at step 1): ")
    assert judge == {
        "decision": "promote",
        "final": True,
        "reason": decision.reason.split("the A/B judge: ")[1],
        "verdict": None,  # a preview stores nothing; the tick does
    }


def test_the_last_step_needs_no_baseline_samples(running: Rollout) -> None:
    Rollout.objects.filter(pk=running.pk).update(
        step_index=1, step_started_at=timezone.now() - dt.timedelta(seconds=60)
    )
    running.refresh_from_db()
    stored(running, "canary", 60, short=True)
    assert decide(running).action == "promote"


def test_the_gateway_records_carry_the_live_rollout(
    running: Rollout, redis_client: redis.Redis
) -> None:
    from gateway.snapshot import SNAPSHOT_KEY, Snapshot
    from orchestration.gateway_snapshot import publish_snapshot

    publish_snapshot()
    snapshot = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or "")
    assert snapshot.routes["chat"].rollout_id == str(running.pk)


# --- the pure core ----------------------------------------------------------------------------

PLAN = Plan(
    steps=(
        Step(weight=5, min_bake_s=60, min_samples=100),
        Step(weight=50, min_bake_s=60, min_samples=100),
        Step(weight=100, min_bake_s=60, min_samples=100),
    )
)
GATES = SloGates(ttft_p95_ms=300, tpot_p95_ms=40, max_error_rate=0.05, min_guardrail_samples=20)


def tick(
    *,
    step_index: int = 0,
    baked_s: float = 120.0,
    resumed: bool = False,
    judged: bool = True,
    scheduled_look_taken: bool = False,
) -> TickState:
    return TickState(PLAN, GATES, step_index, baked_s, resumed, judged, scheduled_look_taken)


def arms(canary: ArmSamples | None = None) -> dict[str, ArmSamples]:
    rng = np.random.default_rng(5)
    return {
        "baseline": make_arm(rng, 400, name="baseline"),
        "canary": canary if canary is not None else make_arm(rng, 400, name="canary"),
    }


def says(decision: Decision) -> Callable[[bool, bool], Report]:
    """A judge that answers every look with `decision`."""

    def look(is_final: bool, scheduled: bool) -> Report:
        return Report(
            (), decision, f"the judge says {decision}", final=is_final, scheduled=scheduled
        )

    return look


def test_each_guardrail_gets_the_guardrails_share_of_alpha_over_the_steps_and_four_tests() -> None:
    decision = decide_on(tick(), arms(), says(Decision.CONTINUE))
    assert [test.name for test in decision.guardrails][:2] == ["error rate", "timeout rate"]
    assert len(decision.guardrails) == 4
    alpha = DEFAULT_POLICY.guardrail_alpha / 3 / 4
    assert [test.threshold for test in decision.guardrails] == pytest.approx([-math.log(alpha)] * 4)
    generous = Policy(metrics=DEFAULT_POLICY.metrics, guardrail_share=0.5)
    looser = decide_on(tick(), arms(), says(Decision.CONTINUE), generous).guardrails[0]
    assert looser.threshold == pytest.approx(-math.log(0.01 * 0.5 / 3 / 4))


def test_a_clear_breach_rolls_back_without_asking_the_judge() -> None:
    rng = np.random.default_rng(6)
    canary = make_arm(rng, 40, error_rate=0.0, status=np.where(np.arange(40) < 20, 500, 200))

    def look(final: bool, scheduled: bool) -> Report:
        raise AssertionError("the judge was asked")

    decision = decide_on(tick(), arms(canary), look)
    assert decision.action == "rollback"
    assert decision.reason.startswith("error rate 50.0% (20 of 40) is above its 5.0% limit")
    assert decision.report is None


def test_the_judges_rollback_at_an_interim_look_is_acted_on() -> None:
    decision = decide_on(tick(baked_s=10), arms(), says(Decision.ROLLBACK))
    assert (decision.action, decision.acted_on_look) == ("rollback", True)
    assert decision.reason == "the A/B judge: the judge says rollback"
    assert decision.evidence["judge"] == {
        "decision": "rollback",
        "final": False,
        "reason": "the judge says rollback",
    }


def test_a_step_the_judge_does_not_compare_is_never_looked_at() -> None:
    def look(final: bool, scheduled: bool) -> Report:
        raise AssertionError("the judge was asked")

    decision = decide_on(tick(step_index=2, judged=False), arms(), look)
    assert decision.action == "promote"
    assert "judge" not in decision.evidence


def test_a_held_verdict_pauses_for_a_person_unless_a_person_resumed_this_step() -> None:
    paused = decide_on(tick(baked_s=1000), arms(), says(Decision.HOLD))
    assert (paused.action, paused.acted_on_look) == ("pause", True)
    resumed = decide_on(tick(baked_s=1000, resumed=True), arms(), says(Decision.HOLD))
    assert (resumed.action, resumed.acted_on_look) == ("hold", False)
    assert resumed.reason == "the A/B judge waits for a settled verdict (resumed)"


def test_only_a_steps_first_final_look_is_its_scheduled_one() -> None:
    looks: list[tuple[bool, bool]] = []

    def look(final: bool, scheduled: bool) -> Report:
        looks.append((final, scheduled))
        return Report((), Decision.HOLD, "unsettled", final=final, scheduled=scheduled)

    decide_on(tick(baked_s=10), arms(), look)  # still baking: an interim look
    decide_on(tick(baked_s=120), arms(), look)  # baked: the step's first final look
    decide_on(tick(baked_s=122, scheduled_look_taken=True), arms(), look)  # held: re-read
    assert looks == [(False, False), (True, True), (True, False)]


def test_the_last_judged_step_waits_four_bake_times_for_samples_before_asking_a_person() -> None:
    short = MetricVerdict(
        metric="ttft_p50",
        outcome=Outcome.INCONCLUSIVE,
        n_baseline=50,
        n_candidate=50,
        baseline=20.0,
        candidate=20.0,
        difference=0.0,
        interval=(math.nan, math.nan),
        threshold=0.06,
        rule=f"{TOO_FEW_SAMPLES}: 200 per arm needed, 50 (baseline) and 50 (candidate) so far",
    )

    def look(final: bool, scheduled: bool) -> Report:
        return Report((short,), Decision.HOLD, "unsettled", final=final, scheduled=scheduled)

    plan = Plan(steps=(Step(weight=50, min_bake_s=120, min_samples=100), Step(weight=100)))

    def at(baked_s: float) -> TickState:
        return TickState(plan, GATES, 0, baked_s, resumed=False, judged=True)

    # Four bake times (480 s) past the bake, not 300 s: still waiting at 400 s past it.
    assert decide_on(at(120 + 400), arms(), look).action == "hold"
    assert decide_on(at(120 + 500), arms(), look).action == "pause"
