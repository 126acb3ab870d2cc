"""Must-reach behaviour of the rollout loop, end to end at 40 requests/s through the gateway."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

from evaluation.models import RequestSample
from orchestration.gateway_snapshot import publish_snapshot
from rollouts.choices import RolloutState
from rollouts.models import Rollout, RolloutEvent
from rollouts.plans import Plan, SloGates, Step
from rollouts.services.rollouts import rollout_create, rollout_start
from tenants.services.accounts import tenant_create
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create
from tests.e2e.conftest import Stack, Traffic, build_stack, record_timing, wait_for_state
from tests.gateway.conftest import GatewayLauncher, wait_for_version
from tests.simfleet.harness import FleetLauncher

S = RolloutState
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

SLOW_PLAN = Plan(
    steps=tuple(Step(weight=w, min_bake_s=600, min_samples=1000) for w in (5, 25, 50, 100))
)
# Short bakes, but the last step the A/B judge compares (50%) runs long enough for the judge
# to settle an equal candidate: TTFT p95 "no more than 10% worse", shown with a bound valid at
# every look, takes some thousands of requests an arm on simfleet. After its bake the step waits
# (up to four bake times more) while an estimate inside the pass margin settles, then asks a
# person.
QUICK_PLAN = Plan(
    steps=(
        Step(weight=5, min_bake_s=3, min_samples=10),
        Step(weight=25, min_bake_s=3, min_samples=10),
        Step(weight=50, min_bake_s=120, min_samples=3000),
        Step(weight=100, min_bake_s=3, min_samples=10),
    )
)


def start(stack: Stack, plan: Plan, gates: SloGates) -> tuple[Rollout, float]:
    rollout = rollout_create(
        actor=None, route=stack.route, candidate=stack.candidate, plan=plan, gates=gates
    )
    started = time.monotonic()
    rollout_start(actor=None, rollout_id=rollout.pk)
    return rollout, started


def test_a_candidate_with_half_its_requests_failing_is_rolled_back_within_20_s(
    tmp_path: Path, launchers: tuple[FleetLauncher, GatewayLauncher], stacks: list[Stack]
) -> None:
    # Far beyond the 5% limit, the guardrail's sequential test is sure within a score of requests
    # (2 a second at 5% of 40 requests/s). A candidate just past the limit (10% errors) takes
    # some hundreds: proving "above 5%" at the guardrails' share of the error budget needs them.
    stack = build_stack(tmp_path, *launchers, candidate_faults={"error_rate": 0.5})
    stacks.append(stack)
    traffic = stack.traffic()
    traffic.start()
    try:
        gates = SloGates(max_error_rate=0.05, min_guardrail_samples=20)
        rollout, started = start(stack, SLOW_PLAN, gates)
        rolled = wait_for_state(rollout.pk, {S.ROLLED_BACK}, seconds=40)
        took = time.monotonic() - started
        record_timing("rollback on 50% errors", took)
        assert took < 20, f"rolled back after {took:.1f} s"
        event = RolloutEvent.objects.get(rollout=rolled, to_state=S.ROLLED_BACK)
        assert event.reason.startswith("error rate")
        # After the decision the gateway sends nothing more to the candidate within 2 s.
        time.sleep(4)
        cutoff = event.created_at + dt.timedelta(seconds=2)
        canary = RequestSample.objects.filter(rollout_id=rollout.pk, arm="canary")
        last = canary.order_by("-ts").values_list("ts", flat=True).first()
        if last is not None:
            record_timing(
                "last canary request after the decision", (last - event.created_at).total_seconds()
            )
        assert not canary.filter(ts__gt=cutoff).exists()
        assert RequestSample.objects.filter(arm="baseline", ts__gt=cutoff).exists()
    finally:
        traffic.stop()


def test_a_candidate_with_3x_the_ttft_is_rolled_back_within_60_s(
    tmp_path: Path, launchers: tuple[FleetLauncher, GatewayLauncher], stacks: list[Stack]
) -> None:
    # Prefill dominates TTFT here (about 110 ms for the 27-token prompt), so 3x prefill is 3x
    # TTFT; eight baseline replicas keep the baseline's queueing, and so its p95, moderate.
    speed = {"step_base_ms": 1, "decode_per_seq_ms": 0.05, "prefill_per_token_ms": 4}
    stack = build_stack(
        tmp_path,
        *launchers,
        candidate_faults={"ttft_multiplier": 3},
        speed=speed,
        baseline_replicas=8,
    )
    stacks.append(stack)
    traffic = stack.traffic()
    traffic.start()
    try:
        gates = SloGates(ttft_p95_ms=400, tpot_p95_ms=None, min_guardrail_samples=20)
        rollout, started = start(stack, SLOW_PLAN, gates)
        rolled = wait_for_state(rollout.pk, {S.ROLLED_BACK}, seconds=90)
        took = time.monotonic() - started
        record_timing("rollback on 3x TTFT", took)
        assert took < 60
        event = RolloutEvent.objects.get(rollout=rolled, to_state=S.ROLLED_BACK)
        assert event.reason.startswith("TTFT p95")
        # The baseline, under the same gate and 19 times the traffic, stayed within it.
        baseline = event.evidence["baseline"]
        assert isinstance(baseline, dict)
        assert baseline["samples"] > 100
        assert baseline["ttft_p95_ms"] < gates.ttft_p95_ms, event.evidence
    finally:
        traffic.stop()


@pytest.mark.timeout(780)
def test_an_equal_candidate_is_promoted_through_every_step_even_if_the_worker_dies(
    tmp_path: Path, launchers: tuple[FleetLauncher, GatewayLauncher], stacks: list[Stack]
) -> None:
    # Equal in capacity too: on one replica against the baseline's two, the candidate would be
    # twice as loaded at 50% and its TTFT tail measurably (if slightly) worse. Meanwhile another
    # tenant, sending no `user`, bursts into its budget throughout. Seen on the demo before: its
    # requests all sat on one arm, its refusals became that arm's "rejection rate", and an equal
    # candidate was rolled back.
    stack = build_stack(tmp_path, *launchers, candidate_replicas=2)
    stacks.append(stack)
    bursting = tenant_create(actor=None, slug="bursty", name="Bursty")
    budget_set(actor=None, tenant=bursting, requests_per_minute=120)
    _, burst_key = api_key_create(actor=None, tenant=bursting, name="burst")
    wait_for_version(stack.gateway, publish_snapshot() or 0)
    traffic = stack.traffic()
    burst = Traffic(url=stack.gateway.url, key=burst_key, rate=10, with_user=False)
    traffic.start()
    burst.start()
    try:
        rollout, started = start(stack, QUICK_PLAN, SloGates(ttft_p95_ms=2000, tpot_p95_ms=500))
        deadline = time.monotonic() + 60
        while Rollout.objects.get(pk=rollout.pk).step_index < 1:
            assert time.monotonic() < deadline, "never reached the second step"
            time.sleep(0.1)
        stack.worker.kill9()  # mid-loop: leases and unacknowledged samples are left behind
        time.sleep(3)
        stack.worker.start()
        # Past the 50% step's bake and its patience (four bakes), so that a step that never
        # settles ends paused, with the judge's reason, rather than unfinished.
        promoted = wait_for_state(rollout.pk, {S.PROMOTED, S.ROLLED_BACK, S.PAUSED}, seconds=660)
        record_timing(
            "promotion through 4 steps (3 s bakes, 120 s and 3,000 samples at 50%), worker killed",
            time.monotonic() - started,
        )
        last = promoted.events.last()
        assert promoted.state == S.PROMOTED, last.reason if last else promoted.state
    finally:
        burst.stop()
        traffic.stop()
    transitions = list(
        RolloutEvent.objects.filter(rollout=rollout).values_list("to_state", "step_index")
    )
    # Every step exactly once: nothing lost, nothing repeated across the kill.
    assert transitions == [
        (S.PREFLIGHT, 0),
        (S.RUNNING, 0),
        (S.RUNNING, 1),
        (S.RUNNING, 2),
        (S.RUNNING, 3),
        (S.PROMOTED, 3),
    ]
    stack.route.refresh_from_db()
    assert (stack.route.baseline_id, stack.route.canary_id) == (stack.candidate.pk, None)
    assert 0 not in traffic.statuses
    assert burst.statuses.count(429) > 100  # it burst into its budget throughout
    refused = RequestSample.objects.filter(rollout_id=rollout.pk, finish="rejected")
    # Its conversations spread over both arms, refusals included, and none of them was judged.
    assert refused.filter(arm="canary").exists()
    assert refused.filter(arm="baseline").exists()
