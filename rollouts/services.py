"""Rollout writes. Every state change goes through `rollout_transition`: one row lock, an explicit
transition table, an event row in the same transaction, and the new weights published to the
gateway only after commit."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from controlplane.audit import audit_record
from controlplane.errors import Conflict, DomainError, NotFound, PermissionDenied
from registry.selectors import gates_cleared
from registry.services import alias_move, gate_override
from rollouts.choices import LIVE_STATES, DeploymentState, RolloutState
from rollouts.models import (
    Deployment,
    PlanTemplate,
    Replica,
    Rollout,
    RolloutEvent,
    Route,
    RouteRule,
    Webhook,
)
from rollouts.plans import DEFAULT_PLAN, Plan, SloGates
from tenants.models import Tenant, User

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


def _publish_after_commit() -> None:
    # Imported here: the snapshot builder reads this app's models.
    from controlplane.gateway_config import publish_snapshot

    # Directly, not through the task queue: a rollback must reach the gateway in seconds.
    transaction.on_commit(publish_snapshot, robust=True)


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
        _publish_after_commit()
        _notify_after_commit(event)
    return rollout


def _notify_after_commit(event: RolloutEvent) -> None:
    from controlplane.celery import app as celery_app

    def send(webhook_id: int) -> None:
        celery_app.send_task(
            "rollouts.notify", kwargs={"event_id": event.pk, "webhook_id": webhook_id}
        )

    for webhook_id in Webhook.objects.filter(active=True).values_list("pk", flat=True):
        transaction.on_commit(functools.partial(send, webhook_id), robust=True)


# How long requests already sent to a deployment may take before it is unloaded.
DRAIN_S = 60


def _retire_after_commit(deployment_id: int, *, delay_s: int) -> None:
    from controlplane.celery import app as celery_app

    transaction.on_commit(
        lambda: celery_app.send_task(
            "rollouts.retire", kwargs={"deployment_id": deployment_id}, countdown=delay_s
        ),
        robust=True,
    )


def _apply(rollout: Rollout, previous: str, to: str, actor: User | None) -> None:
    route = rollout.route
    steps = rollout.parsed_plan.steps
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
        old = route.baseline
        Deployment.objects.filter(pk=old.pk).update(state=DeploymentState.DRAINING)
        # In-flight requests of the old version finish first; then it is unloaded and retired.
        _retire_after_commit(old.pk, delay_s=DRAIN_S)
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
    rollout.state = to


def rollout_start(*, actor: User | None, rollout_id: int) -> Rollout:
    """Into preflight, and through it at once when the candidate is ready; otherwise the tick
    keeps checking until the plan's progress deadline."""
    from rollouts.engine import preflight

    rollout_transition(rollout_id=rollout_id, to=S.PREFLIGHT, actor=actor, reason="start")
    preflight(rollout_id)
    return Rollout.objects.get(pk=rollout_id)


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


def replicas_probe() -> int:
    """Probes every active replica serving a route with a real inference and records the
    outcome; publishes the gateway configuration when a replica's health changed. Returns how
    many changed. Network calls happen outside any transaction."""
    from rollouts.providers import probe

    changed = 0
    deployments = (
        Deployment.objects.filter(pk__in=Route.objects.values("baseline"))
        | Deployment.objects.filter(pk__in=Route.objects.exclude(canary=None).values("canary"))
        | Deployment.objects.filter(pk__in=RouteRule.objects.values("target"))
    )
    for deployment in deployments.select_related("fleet").distinct():
        for replica in deployment.fleet.replicas.filter(state="active"):
            result = probe(replica, deployment.served_model_name)
            row = Replica.objects.filter(pk=replica.pk)
            changed += row.exclude(healthy=result.ok).update(healthy=result.ok)
            row.update(last_probe_at=timezone.now())
    if changed:
        from controlplane.gateway_config import publish_snapshot

        publish_snapshot()
    return changed


# --- route rules: requests sent to a deployment of their own, outside the A/B split ---------------


def _require_release_manager(actor: User | None, what: str) -> User:
    if actor is None or not actor.is_release_manager:
        raise PermissionDenied(f"only release managers may {what}")
    return actor


def _clean(row: RouteRule | PlanTemplate) -> None:
    """full_clean, its errors turned into one message a person can act on."""
    try:
        # Uniqueness is checked by the callers under their lock, and answered as a conflict.
        row.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise DomainError(
            "; ".join(f"{field}: {' '.join(errors)}" for field, errors in exc.message_dict.items())
        ) from exc


def _check_rule(rule: RouteRule, route: Route, tenants: list[Tenant]) -> None:
    target = rule.target
    if not (tenants or rule.tiers or rule.min_prompt_tokens or rule.max_prompt_tokens is not None):
        # A rule matching everything would take the whole route out of its split.
        raise DomainError("a rule must match on something: tenants, tiers, or a prompt-token bound")
    low, high = rule.min_prompt_tokens, rule.max_prompt_tokens
    if low is not None and high is not None and low > high:
        raise DomainError(
            f"min_prompt_tokens ({low}) is above max_prompt_tokens ({high}): no prompt matches"
        )
    if target.state != DeploymentState.READY:
        raise DomainError(
            f"deployment {target.pk} ({target}) is {target.state}: a rule may only send traffic "
            "to a ready deployment"
        )
    if low is not None and target.max_model_len is not None and low >= target.max_model_len:
        raise DomainError(
            f"deployment {target.pk} serves a context of {target.max_model_len} tokens; prompts "
            f"of {low} or more would all fail there"
        )
    allowed = set(route.tenants.values_list("pk", flat=True))
    outsiders = sorted(t.slug for t in tenants if allowed and t.pk not in allowed)
    if outsiders:
        raise DomainError(
            f"route {route.name} is closed to {', '.join(outsiders)}: the rule could never match"
        )


def _rule_audit_data(rule: RouteRule, tenants: list[Tenant]) -> dict[str, Any]:
    return {
        "route": rule.route.name,
        "order": rule.order,
        "tenants": sorted(t.slug for t in tenants),
        "tiers": list(rule.tiers),
        "min_prompt_tokens": rule.min_prompt_tokens,
        "max_prompt_tokens": rule.max_prompt_tokens,
        "target": rule.target_id,
    }


def route_rule_create(
    *,
    actor: User | None,
    route: Route,
    name: str,
    target: Deployment,
    tenants: Iterable[Tenant] = (),
    tiers: Iterable[str] = (),
    min_prompt_tokens: int | None = None,
    max_prompt_tokens: int | None = None,
    order: int | None = None,
) -> RouteRule:
    """A rule at `order` (by default after the route's last one), published after commit."""
    actor = _require_release_manager(actor, "change route rules")
    tenant_list = list(tenants)
    with transaction.atomic():
        # The route's row lock serialises rule changes on it (names and orders stay unique).
        route = Route.objects.select_for_update().get(pk=route.pk)
        rules = RouteRule.objects.filter(route=route)
        if order is None:
            order = (rules.aggregate(last=Max("order"))["last"] or 0) + 1
        rule = RouteRule(
            route=route,
            name=name,
            order=order,
            tiers=sorted(set(tiers)),
            min_prompt_tokens=min_prompt_tokens,
            max_prompt_tokens=max_prompt_tokens,
            target=target,
            created_by=actor,
        )
        _clean(rule)
        _check_rule(rule, route, tenant_list)
        if rules.filter(name=name).exists():
            raise Conflict(f"route {route.name} already has a rule named {name!r}")
        if rules.filter(order=order).exists():
            raise Conflict(f"route {route.name} already has a rule at order {order}")
        rule.save()
        rule.tenants.set(tenant_list)
        audit_record(
            actor=actor,
            action="route_rule.created",
            target=rule,
            data=_rule_audit_data(rule, tenant_list),
        )
        _publish_after_commit()
    return rule


def route_rule_update(
    *,
    actor: User | None,
    rule_id: int,
    target: Deployment,
    tenants: Iterable[Tenant] = (),
    tiers: Iterable[str] = (),
    min_prompt_tokens: int | None = None,
    max_prompt_tokens: int | None = None,
    order: int | None = None,
) -> RouteRule:
    """Replaces what the rule matches and where it sends it (its name stays: past samples carry
    it as their arm)."""
    actor = _require_release_manager(actor, "change route rules")
    tenant_list = list(tenants)
    with transaction.atomic():
        rule = RouteRule.objects.filter(pk=rule_id).select_related("route").first()
        if rule is None:
            raise NotFound(f"route rule {rule_id} does not exist")
        route = Route.objects.select_for_update().get(pk=rule.route_id)
        before = _rule_audit_data(rule, list(rule.tenants.all()))
        rule.target = target
        rule.tiers = sorted(set(tiers))
        rule.min_prompt_tokens, rule.max_prompt_tokens = min_prompt_tokens, max_prompt_tokens
        if order is not None:
            taken = RouteRule.objects.filter(route=route, order=order).exclude(pk=rule.pk)
            if taken.exists():
                raise Conflict(f"route {route.name} already has a rule at order {order}")
            rule.order = order
        _clean(rule)
        _check_rule(rule, route, tenant_list)
        rule.save()
        rule.tenants.set(tenant_list)
        audit_record(
            actor=actor,
            action="route_rule.updated",
            target=rule,
            data={"before": before, "after": _rule_audit_data(rule, tenant_list)},
        )
        _publish_after_commit()
    return rule


def route_rule_delete(*, actor: User | None, rule_id: int, reason: str = "") -> None:
    actor = _require_release_manager(actor, "change route rules")
    with transaction.atomic():
        rule = RouteRule.objects.filter(pk=rule_id).select_related("route").first()
        if rule is None:
            raise NotFound(f"route rule {rule_id} does not exist")
        Route.objects.select_for_update().get(pk=rule.route_id)
        data = _rule_audit_data(rule, list(rule.tenants.all()))
        audit_record(
            actor=actor,
            action="route_rule.deleted",
            target=("rollouts.routerule", str(rule.pk)),
            reason=reason,
            data=data | {"name": rule.name},
        )
        rule.delete()
        _publish_after_commit()


# --- saved plan templates -------------------------------------------------------------------------


def plan_template_create(
    *, actor: User | None, name: str, plan: Plan, gates: SloGates, description: str = ""
) -> PlanTemplate:
    actor = _require_release_manager(actor, "save plan templates")
    template = PlanTemplate(
        name=name,
        description=description,
        plan=plan.model_dump(mode="json"),
        gates=gates.model_dump(mode="json"),
        created_by=actor,
    )
    _clean(template)
    try:
        with transaction.atomic():
            template.save()
            audit_record(
                actor=actor,
                action="plan_template.created",
                target=template,
                data={"plan": template.plan, "gates": template.gates},
            )
    except IntegrityError as exc:
        raise Conflict(f"a plan template named {name!r} already exists") from exc
    return template


def plan_template_update(
    *, actor: User | None, name: str, plan: Plan, gates: SloGates, description: str = ""
) -> PlanTemplate:
    """Rollouts already created keep the plan they copied; only new ones see the change."""
    actor = _require_release_manager(actor, "save plan templates")
    with transaction.atomic():
        template = PlanTemplate.objects.select_for_update().filter(name=name).first()
        if template is None:
            raise NotFound(f"no plan template named {name!r}")
        before = {"plan": template.plan, "gates": template.gates}
        template.plan = plan.model_dump(mode="json")
        template.gates = gates.model_dump(mode="json")
        template.description = description
        _clean(template)
        template.save()
        audit_record(
            actor=actor,
            action="plan_template.updated",
            target=template,
            data={"before": before, "after": {"plan": template.plan, "gates": template.gates}},
        )
    return template


def plan_template_delete(*, actor: User | None, name: str) -> None:
    actor = _require_release_manager(actor, "delete plan templates")
    with transaction.atomic():
        template = PlanTemplate.objects.select_for_update().filter(name=name).first()
        if template is None:
            raise NotFound(f"no plan template named {name!r}")
        audit_record(
            actor=actor,
            action="plan_template.deleted",
            target=("rollouts.plantemplate", str(template.pk)),
            data={"name": name, "plan": template.plan, "gates": template.gates},
        )
        template.delete()
