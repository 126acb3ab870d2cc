"""Rollout writes. Every state change goes through `rollout_transition`: one row lock, an explicit
transition table, an event row in the same transaction, and the new weights published to the
gateway only after commit."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.audit import audit_record
from core.errors import Conflict, DomainError, NotFound, PermissionDenied
from core.idempotency import inside_idempotent_request
from core.publication import gateway_snapshot_changed
from core.tasks import task_enqueue_after_commit
from registry.selectors import gates_cleared
from registry.services import alias_move, gate_override
from rollouts import providers
from rollouts.choices import LIVE_STATES, DeploymentState, RolloutState
from rollouts.models import Deployment, Rollout, RolloutEvent, Route, Webhook
from rollouts.plans import DEFAULT_PLAN, Plan, SloGates
from tenants.models import User

S = RolloutState
TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.PREFLIGHT, S.ABORTED}),
    S.PREFLIGHT: frozenset({S.RUNNING, S.FAILED, S.ABORTED}),
    # running -> running is the move to the next step.
    S.RUNNING: frozenset({S.RUNNING, S.PAUSED, S.PROMOTED, S.ROLLED_BACK, S.ABORTED}),
    S.PAUSED: frozenset({S.RUNNING, S.PROMOTED, S.ROLLED_BACK, S.ABORTED}),
    S.PROMOTED: frozenset(),
    S.ROLLED_BACK: frozenset(),
    S.ABORTED: frozenset(),
    S.FAILED: frozenset(),
}


def rollout_create(
    *,
    actor: User | None,
    route: Route,
    candidate: Deployment,
    plan: Plan = DEFAULT_PLAN,
    gates: SloGates | None = None,
    override_reason: str = "",
    control: Deployment | None = None,
) -> Rollout:
    """A pending rollout. A candidate that fails its promotion gates needs a release manager's
    written override to get this far."""
    if candidate.pk == route.baseline_id:
        raise DomainError(f"{candidate} already is the baseline of {route}")
    if control is not None:
        _check_control(control, route=route, candidate=candidate)
    if not gates_cleared(candidate.artifact):
        if not override_reason:
            raise DomainError(
                f"{candidate.artifact} fails its promotion gates; a release manager may "
                "override them with a written reason"
            )
        if actor is None:
            raise DomainError("an override needs a release manager")
        gate_override(actor=actor, artifact=candidate.artifact, reason=override_reason)
    rollout = Rollout(
        route=route,
        baseline=route.baseline,
        candidate=candidate,
        control=control,
        plan=plan.model_dump(mode="json"),
        gates=(gates or SloGates()).model_dump(mode="json"),
        created_by=actor,
    )
    with transaction.atomic():
        if Rollout.objects.filter(route=route, state__in=LIVE_STATES).exists():
            raise Conflict(f"{route} already has a live rollout")
        rollout.save()
        audit_record(actor=actor, action="rollout.created", target=rollout)
    return rollout


def _check_control(control: Deployment, *, route: Route, candidate: Deployment) -> None:
    if control.pk in (route.baseline_id, candidate.pk):
        raise DomainError("the control must be a deployment of its own, not the baseline's")
    if control.artifact_id != route.baseline.artifact_id:
        raise DomainError(
            f"the control must serve the baseline's artifact ({route.baseline.artifact}), "
            f"not {control.artifact}"
        )
    if control.state != DeploymentState.READY:
        raise DomainError(f"the control {control} is {control.state}, not ready")


def rollout_transition(
    *,
    rollout_id: int,
    to: RolloutState,
    actor: User | None,
    reason: str,
    evidence: dict[str, Any] | None = None,
    expected_step: int | None = None,
) -> Rollout:
    """Moves a rollout to `to`. Already there is a no-op (tasks run twice); a decision taken on a
    step the rollout has since left (`expected_step`) is dropped, not applied to the next one."""
    with transaction.atomic():
        rollout = (
            Rollout.objects.select_for_update()
            .select_related("route")
            .filter(pk=rollout_id)
            .first()
        )
        if rollout is None:
            raise NotFound(f"rollout {rollout_id} does not exist")
        if expected_step is not None and rollout.step_index != expected_step:
            return rollout
        if rollout.state == to and to != S.RUNNING:
            return rollout
        if rollout.state == to == S.RUNNING and expected_step is None:
            # Moving on a step is only safe as a compare-and-set on the step it leaves.
            raise DomainError("moving to the next step needs expected_step")
        if to not in TRANSITIONS[rollout.state]:
            raise Conflict(f"rollout {rollout_id} cannot go from {rollout.state} to {to}")
        previous = rollout.state
        _apply(rollout, previous, to, actor)
        rollout.save()
        event = RolloutEvent.objects.create(
            rollout=rollout,
            from_state=previous,
            to_state=to,
            step_index=rollout.step_index,
            actor=actor,
            actor_name=actor.get_username() if actor else "system",
            reason=reason,
            evidence=evidence or {},
        )
        audit_record(
            actor=actor,
            action=f"rollout.{to}",
            target=rollout,
            reason=reason,
            data={"from": previous, "step": rollout.step_index},
        )
        gateway_snapshot_changed()
        _notify_after_commit(event)
    return rollout


def _notify_after_commit(event: RolloutEvent) -> None:
    for webhook_id in Webhook.objects.filter(active=True).values_list("pk", flat=True):
        task_enqueue_after_commit("rollouts.notify", event_id=event.pk, webhook_id=webhook_id)


# How long requests already sent to a deployment may take before it is unloaded.
DRAIN_S = 60


def _retire_after_commit(deployment_id: int, *, delay_s: int) -> None:
    task_enqueue_after_commit("rollouts.retire", countdown=delay_s, deployment_id=deployment_id)


def _apply(rollout: Rollout, previous: str, to: str, actor: User | None) -> None:
    route = rollout.route
    steps = rollout.parsed_plan.steps
    old_baseline = route.baseline
    if to == S.RUNNING:
        if previous == S.RUNNING:
            if rollout.step_index + 1 >= len(steps):
                raise Conflict("the last step is running: promote instead")
            rollout.step_index += 1
        if previous != S.PAUSED:
            rollout.step_started_at = timezone.now()
        route.canary = rollout.candidate
        route.canary_weight = steps[rollout.step_index].weight
        route.control = rollout.control
        route.salt = f"rollout-{rollout.pk}"
    elif to == S.PROMOTED:
        route.baseline = rollout.candidate
        route.canary, route.canary_weight, route.control = None, 0.0, None
        artifact = rollout.candidate.artifact
        alias_move(
            actor=actor,
            family=artifact.family,
            name="production",
            artifact=artifact,
            reason=f"promoted by rollout {rollout.pk}",
        )
    elif to in (S.ROLLED_BACK, S.ABORTED, S.FAILED):
        route.canary, route.canary_weight, route.control = None, 0.0, None
        if previous != S.PENDING:
            _retire_after_commit(rollout.candidate_id, delay_s=DRAIN_S)
    route.save(update_fields=["baseline", "canary", "canary_weight", "control", "salt"])
    if to == S.PROMOTED and not Deployment.objects.in_use().filter(pk=old_baseline.pk).exists():
        # No route or rule uses the old version any more: in-flight requests finish first,
        # then it is unloaded and retired.
        Deployment.objects.filter(pk=old_baseline.pk).update(state=DeploymentState.DRAINING)
        _retire_after_commit(old_baseline.pk, delay_s=DRAIN_S)
    rollout.state = to


def rollout_start(*, actor: User | None, rollout_id: int) -> Rollout:
    """Into preflight, and through it at once when the candidate is ready; otherwise the tick
    keeps checking until the plan's progress deadline."""
    rollout_transition(rollout_id=rollout_id, to=S.PREFLIGHT, actor=actor, reason="start")
    candidate_ready = Rollout.objects.filter(
        pk=rollout_id, candidate__state=DeploymentState.READY
    ).exists()
    if inside_idempotent_request() and not candidate_ready:
        # Getting a candidate ready loads adapters and probes replicas over the network: not
        # while a caller's transaction (an API write under an Idempotency-Key) holds the
        # rollout's lock. The tick would get to it too; this is sooner.
        transaction.on_commit(lambda: rollout_preflight(rollout_id=rollout_id), robust=True)
    else:
        rollout_preflight(rollout_id=rollout_id)
    return Rollout.objects.get(pk=rollout_id)


def rollout_preflight(*, rollout_id: int, now: dt.datetime | None = None) -> None:
    """Gets the candidate ready (loading adapters) and starts the first step once every replica
    answers a real inference for it; fails the rollout past the plan's progress deadline."""
    rollout = (
        Rollout.objects.select_related("candidate__fleet", "candidate__artifact")
        .filter(pk=rollout_id)
        .first()
    )
    if rollout is None or rollout.state != RolloutState.PREFLIGHT:
        return
    candidate = rollout.candidate
    if candidate.state != DeploymentState.READY:
        problems = providers.prepare(candidate)
        ready, not_ready = providers.is_ready(candidate)
        if not ready:
            began = (
                rollout.events.filter(to_state=RolloutState.PREFLIGHT)
                .values_list("created_at", flat=True)
                .last()
            )
            waited = ((now or timezone.now()) - (began or rollout.created_at)).total_seconds()
            if waited > rollout.parsed_plan.progress_deadline_s:
                rollout_transition(
                    rollout_id=rollout.pk,
                    to=RolloutState.FAILED,
                    actor=None,
                    reason=f"the candidate was not ready after {waited:.0f} s",
                    evidence={"problems": problems + not_ready},
                )
            return
        Deployment.objects.filter(pk=candidate.pk).update(state=DeploymentState.READY, problems=[])
    rollout_transition(
        rollout_id=rollout.pk,
        to=RolloutState.RUNNING,
        actor=None,
        reason="preflight passed: every replica answers the candidate",
    )


# --- manual control: each with a reason, each through the transition function --------------------

Action = str
MANUAL_ACTIONS: dict[Action, RolloutState] = {
    "pause": S.PAUSED,
    "resume": S.RUNNING,
    "skip": S.RUNNING,
    "promote": S.PROMOTED,
    "rollback": S.ROLLED_BACK,
    "abort": S.ABORTED,
}


def rollout_control(*, actor: User, rollout_id: int, action: Action, reason: str) -> Rollout:
    """A release manager's hand on the rollout: pause, resume, skip to the next step, promote
    now, roll back or abort."""
    if not actor.is_release_manager:
        raise PermissionDenied("only release managers may steer a rollout")
    if action not in MANUAL_ACTIONS:
        raise DomainError(f"unknown action {action!r}; one of {', '.join(MANUAL_ACTIONS)}")
    if not reason.strip():
        raise DomainError("say why (reason)")
    rollout = Rollout.objects.filter(pk=rollout_id).first()
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} does not exist")
    if action == "resume" and rollout.state != S.PAUSED:
        raise Conflict(f"rollout {rollout_id} is {rollout.state}, not paused")
    if action == "skip" and rollout.state != S.RUNNING:
        raise Conflict(f"rollout {rollout_id} is {rollout.state}: only a running step is skipped")
    if action == "pause" and rollout.state == S.PENDING:
        raise Conflict(f"rollout {rollout_id} has not started")
    return rollout_transition(
        rollout_id=rollout_id,
        to=MANUAL_ACTIONS[action],
        actor=actor,
        reason=f"{action}: {reason}",
        expected_step=rollout.step_index if action == "skip" else None,
    )
