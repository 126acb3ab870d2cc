from __future__ import annotations

from typing import Any

from rest_framework import serializers

from rollouts.models import Rollout, RolloutEvent
from rollouts.services import MANUAL_ACTIONS


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
    steps = StepInput(many=True, required=False)
    gates = SloGatesInput(required=False)
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
    canary_weight = serializers.FloatField(source="current_weight")
    events = EventOutput(many=True, read_only=True)

    class Meta:
        model = Rollout
        fields = [
            "id",
            "route",
            "baseline",
            "candidate",
            "state",
            "step_index",
            "step_started_at",
            "canary_weight",
            "plan",
            "gates",
            "created_at",
            "events",
        ]
