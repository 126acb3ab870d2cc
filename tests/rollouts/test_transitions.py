"""The rollout state machine: transitions, route weights, promotion and rollback."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from django.db import connection

from core.errors import Conflict, DomainError
from registry.selectors import alias_target
from rollouts.choices import RolloutState
from rollouts.models import Deployment, Rollout, RolloutEvent, Route
from rollouts.plans import Plan, Step
from rollouts.services.rollouts import rollout_create, rollout_start, rollout_transition
from tenants.models import User
from tests.factories import DeploymentFactory

S = RolloutState
PLAN = Plan(steps=(Step(weight=5), Step(weight=50), Step(weight=100)))


def refreshed(route: Route) -> Route:
    route.refresh_from_db()
    return route


def test_starting_sends_the_first_steps_weight_to_the_candidate(
    route: Route, candidate: Deployment, release_manager: User, redis_client: redis.Redis
) -> None:
    rollout = rollout_create(actor=release_manager, route=route, candidate=candidate, plan=PLAN)
    rollout_start(actor=release_manager, rollout_id=rollout.pk)
    route = refreshed(route)
    assert (route.canary, route.canary_weight) == (candidate, 5.0)
    assert route.salt == f"rollout-{rollout.pk}"
    states = list(RolloutEvent.objects.values_list("from_state", "to_state"))
    assert states == [(S.PENDING, S.PREFLIGHT), (S.PREFLIGHT, S.RUNNING)]


def test_steps_advance_by_compare_and_set_and_a_retry_changes_nothing(
    route: Route, candidate: Deployment, redis_client: redis.Redis
) -> None:
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    rollout_start(actor=None, rollout_id=rollout.pk)
    rollout_transition(
        rollout_id=rollout.pk, to=S.RUNNING, actor=None, reason="bake ok", expected_step=0
    )
    # The same decision delivered twice (a task run twice) must not skip step 2.
    rollout_transition(
        rollout_id=rollout.pk, to=S.RUNNING, actor=None, reason="bake ok", expected_step=0
    )
    assert Rollout.objects.get(pk=rollout.pk).step_index == 1
    assert refreshed(route).canary_weight == 50.0
    with pytest.raises(DomainError, match="expected_step"):
        rollout_transition(rollout_id=rollout.pk, to=S.RUNNING, actor=None, reason="x")


def test_promotion_makes_the_candidate_the_baseline_and_moves_production(
    route: Route, candidate: Deployment, redis_client: redis.Redis
) -> None:
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    rollout_start(actor=None, rollout_id=rollout.pk)
    rollout_transition(rollout_id=rollout.pk, to=S.PROMOTED, actor=None, reason="all steps ok")
    route = refreshed(route)
    assert (route.baseline, route.canary, route.canary_weight) == (candidate, None, 0.0)
    assert alias_target("support-chat", "production") == candidate.artifact


def test_rollback_sends_nothing_more_to_the_candidate(
    route: Route, candidate: Deployment, redis_client: redis.Redis
) -> None:
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    rollout_start(actor=None, rollout_id=rollout.pk)
    rollout_transition(
        rollout_id=rollout.pk,
        to=S.ROLLED_BACK,
        actor=None,
        reason="error rate 12% > 5%",
        evidence={"error_rate": 0.12, "samples": 80},
    )
    route = refreshed(route)
    assert (route.baseline.served_model_name, route.canary, route.canary_weight) == (
        "chat-v1",
        None,
        0.0,
    )
    event = RolloutEvent.objects.get(to_state=S.ROLLED_BACK)
    assert event.evidence == {"error_rate": 0.12, "samples": 80}


def test_terminal_states_are_final(
    route: Route, candidate: Deployment, redis_client: redis.Redis
) -> None:
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    rollout_transition(rollout_id=rollout.pk, to=S.ABORTED, actor=None, reason="wrong candidate")
    with pytest.raises(Conflict, match="cannot go from aborted to preflight"):
        rollout_transition(rollout_id=rollout.pk, to=S.PREFLIGHT, actor=None, reason="again")
    # Aborting again is a no-op, not an error: tasks run twice.
    rollout_transition(rollout_id=rollout.pk, to=S.ABORTED, actor=None, reason="again")
    assert RolloutEvent.objects.filter(to_state=S.ABORTED).count() == 1


def test_one_live_rollout_per_route(route: Route, candidate: Deployment) -> None:
    rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    with pytest.raises(Conflict, match="already has a live rollout"):
        rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)


def test_a_candidate_failing_its_gates_needs_a_written_override(
    route: Route, candidate: Deployment, release_manager: User
) -> None:
    from registry.services import GateSpec, gates_set

    gates_set(actor=None, family="support-chat", gates=[GateSpec("qa", "acc", min_value=0.9)])
    with pytest.raises(DomainError, match="fails its promotion gates"):
        rollout_create(actor=release_manager, route=route, candidate=candidate, plan=PLAN)
    rollout = rollout_create(
        actor=release_manager,
        route=route,
        candidate=candidate,
        plan=PLAN,
        override_reason="qa eval is being rebuilt, see ticket 42",
    )
    assert rollout.state == S.PENDING


def test_the_gateway_snapshot_follows_after_commit(
    route: Route,
    candidate: Deployment,
    redis_client: redis.Redis,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from gateway.snapshot import SNAPSHOT_KEY, Snapshot

    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    with django_capture_on_commit_callbacks(execute=False) as pending:
        rollout_start(actor=None, rollout_id=rollout.pk)
    assert redis_client.get(SNAPSHOT_KEY) is None  # nothing before the commit
    for callback in pending:
        callback()
    snapshot = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or "")
    assert [(a.name, a.weight) for a in snapshot.routes["chat"].arms] == [
        ("baseline", 95.0),
        ("canary", 5.0),
    ]


@pytest.mark.django_db(transaction=True)
def test_two_workers_deciding_at_once_move_one_step(
    route: Route, candidate: Deployment, redis_client: redis.Redis
) -> None:
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    rollout_start(actor=None, rollout_id=rollout.pk)
    barrier = threading.Barrier(2)

    def advance() -> None:
        try:
            barrier.wait()
            rollout_transition(
                rollout_id=rollout.pk, to=S.RUNNING, actor=None, reason="ok", expected_step=0
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=advance) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Rollout.objects.get(pk=rollout.pk).step_index == 1
    assert RolloutEvent.objects.filter(from_state=S.RUNNING, to_state=S.RUNNING).count() == 1


def test_a_control_arm_runs_beside_the_canary_at_its_weight_until_the_rollout_ends(
    route: Route, candidate: Deployment, redis_client: redis.Redis
) -> None:
    from orchestration.gateway_snapshot import build_snapshot

    # A second copy of the baseline's artifact, on replicas of its own.
    control = DeploymentFactory.create(
        artifact=route.baseline.artifact,
        fleet=route.baseline.fleet,
        served_model_name="chat-v1-control",
        state="ready",
    )
    rollout = rollout_create(
        actor=None, route=route, candidate=candidate, plan=PLAN, control=control
    )
    rollout_start(actor=None, rollout_id=rollout.pk)
    arms = [(a.name, a.weight) for a in build_snapshot(version=1).routes["chat"].arms]
    assert arms == [("baseline", 90.0), ("canary", 5.0), ("control", 5.0)]

    rollout_transition(
        rollout_id=rollout.pk, to=S.RUNNING, actor=None, reason="ok", expected_step=0
    )
    arms = [(a.name, a.weight) for a in build_snapshot(version=2).routes["chat"].arms]
    assert arms == [("baseline", 0.0), ("canary", 50.0), ("control", 50.0)]

    rollout_transition(rollout_id=rollout.pk, to=S.ROLLED_BACK, actor=None, reason="worse")
    assert refreshed(route).control is None
    arms = [(a.name, a.weight) for a in build_snapshot(version=3).routes["chat"].arms]
    assert arms == [("baseline", 100.0)]


def test_a_control_must_be_a_ready_copy_of_the_baseline(
    route: Route, candidate: Deployment
) -> None:
    with pytest.raises(DomainError, match="deployment of its own"):
        rollout_create(actor=None, route=route, candidate=candidate, control=route.baseline)
    other = DeploymentFactory.create(
        artifact=candidate.artifact, fleet=route.baseline.fleet, served_model_name="v2-copy"
    )
    with pytest.raises(DomainError, match="the baseline's artifact"):
        rollout_create(actor=None, route=route, candidate=candidate, control=other)
    pending = DeploymentFactory.create(
        artifact=route.baseline.artifact, fleet=route.baseline.fleet, served_model_name="copy"
    )
    with pytest.raises(DomainError, match="not ready"):
        rollout_create(actor=None, route=route, candidate=candidate, control=pending)
    assert not Rollout.objects.exists()
