"""Tick decisions on real samples: guardrails roll back at once, steps move when baked."""

from __future__ import annotations

import datetime as dt
import random
import uuid

import pytest
import redis
from django.utils import timezone

from evaluation.models import RequestSample
from rollouts.choices import RolloutState
from rollouts.engine import advance, decide
from rollouts.models import Deployment, Rollout, RolloutEvent, Route
from rollouts.plans import Plan, SloGates, Step
from rollouts.services.rollouts import rollout_create, rollout_start
from workers import rollouts as rollout_tasks

S = RolloutState
PLAN = Plan(
    steps=(
        Step(weight=10, min_bake_s=30, min_samples=50),
        Step(weight=100, min_bake_s=30, min_samples=50),
    )
)
GATES = SloGates(ttft_p95_ms=300, tpot_p95_ms=40, max_error_rate=0.05, min_guardrail_samples=20)


@pytest.fixture
def running(route: Route, candidate: Deployment, redis_client: redis.Redis) -> Rollout:
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN, gates=GATES)
    return rollout_start(actor=None, rollout_id=rollout.pk)


def samples(
    rollout: Rollout, arm: str, count: int, *, status: int = 200, ttft: float = 50, tpot: float = 5
) -> None:
    RequestSample.objects.bulk_create(
        RequestSample(
            rid=uuid.uuid4().hex,
            ts=timezone.now(),
            rollout_id=rollout.pk,
            step=rollout.step_index,  # as the consumer files it
            route="chat",
            arm=arm,
            deployment="x",
            tenant="acme",
            status=status,
            finish="error" if status >= 500 else "stop",
            prompt_tokens=10,
            output_tokens=20,
            ttft_ms=ttft,
            tpot_ms=tpot,
            e2e_ms=ttft + 20 * tpot,
        )
        for _ in range(count)
    )


def later(seconds: float) -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=seconds)


def test_it_holds_while_the_step_bakes(running: Rollout) -> None:
    samples(running, "canary", 60)
    samples(running, "baseline", 60)
    assert decide(running).action == "hold"


def test_an_error_rate_over_the_guardrail_rolls_back_before_the_step_ends(
    running: Rollout,
) -> None:
    samples(running, "canary", 18)
    samples(running, "canary", 4, status=500)  # 18% of 22
    decision = advance(running.pk)
    assert decision is not None
    assert decision.action == "rollback"
    assert decision.reason.startswith("error rate 18.2% > 5.0%")
    running.refresh_from_db()
    assert running.state == S.ROLLED_BACK
    event = RolloutEvent.objects.get(to_state=S.ROLLED_BACK)
    assert event.evidence["canary"]["errors"] == 4


def test_too_few_samples_never_condemn_a_candidate(running: Rollout) -> None:
    samples(running, "canary", 3, status=500)
    assert decide(running).action == "hold"


def test_a_hard_ttft_breach_rolls_back(running: Rollout) -> None:
    samples(running, "canary", 30, ttft=900)
    decision = decide(running)
    assert decision.action == "rollback"
    assert "TTFT p95 900 ms > 300 ms" in decision.reason


def test_client_disconnects_do_not_count_as_errors(running: Rollout) -> None:
    samples(running, "canary", 30)
    samples(running, "canary", 30, status=499)
    assert decide(running).action == "hold"


def test_a_baked_step_waits_for_the_samples_the_judge_needs_then_moves_on(
    running: Rollout,
) -> None:
    samples(running, "canary", 60)
    samples(running, "baseline", 60)
    waiting = decide(running, now=later(31))
    assert waiting.action == "hold"
    assert waiting.reason.startswith("the A/B judge waits for samples for ttft_p50")
    rng = random.Random(7)  # noqa: S311 -- test data, not secrets
    for _ in range(1500):  # an equal candidate, with the spread real latencies have
        for arm in ("canary", "baseline"):
            samples(running, arm, 1, ttft=rng.lognormvariate(4, 0.3), tpot=rng.uniform(4, 6))
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
    samples(running, "canary", 60)
    assert decide(running).action == "promote"


def test_a_held_lease_makes_a_second_advance_a_no_op(
    running: Rollout, redis_client: redis.Redis
) -> None:
    samples(running, "canary", 25, status=500)
    redis_client.set(f"tollgate:rollouts:lease:{running.pk}", "someone-else", px=5000)
    rollout_tasks.advance(rollout_id=running.pk)
    running.refresh_from_db()
    assert running.state == S.RUNNING
    redis_client.delete(f"tollgate:rollouts:lease:{running.pk}")
    rollout_tasks.advance(rollout_id=running.pk)
    running.refresh_from_db()
    assert running.state == S.ROLLED_BACK


def test_the_gateway_records_carry_the_live_rollout(
    running: Rollout, redis_client: redis.Redis
) -> None:
    from controlplane.gateway_config import publish_snapshot
    from gateway.snapshot import SNAPSHOT_KEY, Snapshot

    publish_snapshot()
    snapshot = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or "")
    assert snapshot.routes["chat"].rollout_id == str(running.pk)
