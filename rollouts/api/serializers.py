from __future__ import annotations

from typing import Any

from rest_framework import serializers

from rollouts.choices import DeploymentState
from rollouts.models import (
    RULE_NAME_MAX_LENGTH,
    Deployment,
    PlanTemplate,
    Rollout,
    RolloutEvent,
    RouteRule,
)
from rollouts.selectors import visible_tenant_slugs
from rollouts.services.rollouts import MANUAL_ACTIONS
from tenants.choices import Tier


class StepInput(serializers.Serializer[dict[str, Any]]):
    weight = serializers.FloatField(min_value=0.001, max_value=100)
    min_bake_s = serializers.IntegerField(min_value=0, default=300)
    min_samples = serializers.IntegerField(min_value=1, default=200)


class SloGatesInput(serializers.Serializer[dict[str, Any]]):
    ttft_p95_ms = serializers.FloatField(min_value=0.001, allow_null=True, default=500)
    tpot_p95_ms = serializers.FloatField(min_value=0.001, allow_null=True, default=50)
    max_error_rate = serializers.FloatField(min_value=0, max_value=1, default=0.05)
    max_timeout_rate = serializers.FloatField(min_value=0, max_value=1, default=0.05)
    min_guardrail_samples = serializers.IntegerField(min_value=1, default=20)


class RolloutCreateInput(serializers.Serializer[dict[str, Any]]):
    route = serializers.CharField(max_length=100)
    candidate_deployment = serializers.IntegerField(min_value=1)
    control_deployment = serializers.IntegerField(
        min_value=1,
        required=False,
        help_text="A second deployment of the baseline's artifact, given the canary's weight so "
        "the judge compares the candidate with the baseline under the same load",
    )
    steps = StepInput(many=True, required=False)
    gates = SloGatesInput(required=False)
    plan_template = serializers.SlugField(
        max_length=100,
        required=False,
        help_text="A saved plan template's name: its steps and gates, unless `steps` or `gates` "
        "are given too",
    )
    override_reason = serializers.CharField(max_length=4000, required=False, default="")
    start = serializers.BooleanField(default=True)


class ActionInput(serializers.Serializer[dict[str, Any]]):
    action = serializers.ChoiceField(choices=sorted(MANUAL_ACTIONS))
    reason = serializers.CharField(max_length=4000)


class EventOutput(serializers.ModelSerializer[RolloutEvent]):
    class Meta:
        model = RolloutEvent
        fields = [
            "from_state",
            "to_state",
            "step_index",
            "actor_name",
            "reason",
            "evidence",
            "created_at",
        ]


class RolloutOutput(serializers.ModelSerializer[Rollout]):
    route = serializers.CharField(source="route.name")
    candidate = serializers.CharField(source="candidate.artifact")
    baseline = serializers.CharField(source="baseline.artifact")
    control = serializers.CharField(source="control.artifact", allow_null=True, default=None)
    canary_weight = serializers.FloatField(source="current_weight")
    events = EventOutput(many=True, read_only=True)

    class Meta:
        model = Rollout
        fields = [
            "id",
            "route",
            "baseline",
            "candidate",
            "control",
            "state",
            "step_index",
            "step_started_at",
            "canary_weight",
            "plan",
            "gates",
            "created_at",
            "events",
        ]


class RouteRuleInput(serializers.Serializer[dict[str, Any]]):
    target_deployment = serializers.IntegerField(min_value=1)
    tenants = serializers.ListField(child=serializers.SlugField(max_length=63), default=list)
    tiers = serializers.ListField(child=serializers.ChoiceField(choices=Tier.choices), default=list)
    min_prompt_tokens = serializers.IntegerField(min_value=0, allow_null=True, default=None)
    max_prompt_tokens = serializers.IntegerField(min_value=0, allow_null=True, default=None)
    order = serializers.IntegerField(min_value=0, max_value=32767, allow_null=True, default=None)


class RouteRuleCreateInput(RouteRuleInput):
    name = serializers.CharField(max_length=RULE_NAME_MAX_LENGTH)


class RuleTargetOutput(serializers.ModelSerializer[Deployment]):
    artifact = serializers.CharField(source="artifact.__str__")
    fleet = serializers.CharField(source="fleet.name")

    class Meta:
        model = Deployment
        fields = ["id", "artifact", "fleet", "served_model_name", "max_model_len", "state"]


class RouteRuleOutput(serializers.ModelSerializer[RouteRule]):
    """`tenants` as the caller may see them (a tenant admin: only their own)."""

    arm = serializers.CharField(source="arm_name")
    tenants = serializers.SerializerMethodField()
    target = RuleTargetOutput()
    active = serializers.SerializerMethodField(
        help_text="False while the target is not ready: the rule is then not published"
    )

    class Meta:
        model = RouteRule
        fields = [
            "name",
            "order",
            "arm",
            "tenants",
            "tiers",
            "min_prompt_tokens",
            "max_prompt_tokens",
            "target",
            "active",
            "created_at",
        ]

    def get_tenants(self, rule: RouteRule) -> list[str]:
        return visible_tenant_slugs(self.context["user"], rule.tenants.all())

    def get_active(self, rule: RouteRule) -> bool:
        return rule.target.state == DeploymentState.READY


class PlanTemplateInput(serializers.Serializer[dict[str, Any]]):
    description = serializers.CharField(max_length=500, allow_blank=True, default="")
    steps = StepInput(many=True)
    progress_deadline_s = serializers.IntegerField(min_value=1, default=1200)
    gates = SloGatesInput(required=False)


class PlanTemplateCreateInput(PlanTemplateInput):
    name = serializers.SlugField(max_length=100)


class PlanTemplateOutput(serializers.ModelSerializer[PlanTemplate]):
    class Meta:
        model = PlanTemplate
        fields = ["name", "description", "plan", "gates", "created_at", "updated_at"]
