"""Saved plan template writes. A rollout copies its template's plan when it is created, so a change
reaches only rollouts created after it."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from core.audit import audit_record
from core.errors import Conflict, NotFound
from rollouts.models import PlanTemplate
from rollouts.plans import Plan, SloGates
from rollouts.services.common import full_clean_or_raise, require_release_manager
from tenants.models import User


def plan_template_create(
    *, actor: User | None, name: str, plan: Plan, gates: SloGates, description: str = ""
) -> PlanTemplate:
    actor = require_release_manager(actor, "save plan templates")
    template = PlanTemplate(
        name=name,
        description=description,
        plan=plan.model_dump(mode="json"),
        gates=gates.model_dump(mode="json"),
        created_by=actor,
    )
    full_clean_or_raise(template)
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
    actor = require_release_manager(actor, "save plan templates")
    with transaction.atomic():
        template = PlanTemplate.objects.select_for_update().filter(name=name).first()
        if template is None:
            raise NotFound(f"no plan template named {name!r}")
        before = {"plan": template.plan, "gates": template.gates}
        template.plan = plan.model_dump(mode="json")
        template.gates = gates.model_dump(mode="json")
        template.description = description
        full_clean_or_raise(template)
        template.save()
        audit_record(
            actor=actor,
            action="plan_template.updated",
            target=template,
            data={"before": before, "after": {"plan": template.plan, "gates": template.gates}},
        )
    return template


def plan_template_delete(*, actor: User | None, name: str) -> None:
    actor = require_release_manager(actor, "delete plan templates")
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
