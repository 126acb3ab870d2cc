"""Tick decisions on real samples: guardrails roll back at once, steps move when baked."""

from __future__ import annotations

import datetime as dt
import random

import redis
from django.utils import timezone

from orchestration.engine import advance, decide
from rollouts.choices import RolloutState
from rollouts.models import Rollout, RolloutEvent
from tests.conftest import stored

S = RolloutState


def later(seconds: float) -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=seconds)


def test_it_holds_while_the_step_bakes(running: Rollout) -> None:
    stored(running, "canary", 60, short=True)
    stored(running, "baseline", 60, short=True)
    assert decide(running).action == "hold"


def test_an_error_rate_over_the_guardrail_rolls_back_before_the_step_ends(
    running: Rollout,
) -> None:
    stored(running, "canary", 18, short=True)
    stored(running, "canary", 4, short=True, status=500)  # 18% of 22
    decision = advance(running.pk)
    assert decision is not None
    assert decision.action == "rollback"
    assert decision.reason.startswith("error rate 18.2% > 5.0%")
    running.refresh_from_db()
    assert running.state == S.ROLLED_BACK
    event = RolloutEvent.objects.get(to_state=S.ROLLED_BACK)
    assert event.evidence["canary"]["errors"] == 4


def test_too_few_samples_never_condemn_a_candidate(running: Rollout) -> None:
    stored(running, "canary", 3, short=True, status=500)
    assert decide(running).action == "hold"


def test_a_hard_ttft_breach_rolls_back(running: Rollout) -> None:
    stored(running, "canary", 30, short=True, ttft_ms=900)
    decision = decide(running)
    assert decision.action == "rollback"
    assert "TTFT p95 900 ms > 300 ms" in decision.reason


def test_client_disconnects_do_not_count_as_errors(running: Rollout) -> None:
    stored(running, "canary", 30, short=True)
    stored(running, "canary", 30, short=True, status=499)
    assert decide(running).action == "hold"


def test_a_baked_step_waits_for_the_samples_the_judge_needs_then_moves_on(
    running: Rollout,
) -> None:
    stored(running, "canary", 60, short=True)
    stored(running, "baseline", 60, short=True)
    waiting = decide(running, now=later(31))
    assert waiting.action == "hold"
    assert waiting.reason.startswith("the A/B judge waits for samples for ttft_p50")
    rng = random.Random(7)  # noqa: S311 -- test data, not secrets
    for _ in range(1500):  # an equal candidate, with the spread real latencies have
        for arm in ("canary", "baseline"):
            stored(
                running,
                arm,
                1,
                short=True,
                ttft_ms=rng.lognormvariate(4, 0.3),
                tpot_ms=rng.uniform(4, 6),
            )
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
