from __future__ import annotations

from typing import Any

from rest_framework import serializers

from evaluation.choices import FeedbackValue
from evaluation.models import Feedback

THUMBS = [FeedbackValue.UP.value, FeedbackValue.DOWN.value]
OUTCOMES = [FeedbackValue.SUCCESS.value, FeedbackValue.FAILURE.value]


class FeedbackInput(serializers.Serializer[dict[str, Any]]):
    id = serializers.CharField(
        max_length=100, help_text="The `id` of the completion the gateway returned."
    )
    thumbs = serializers.ChoiceField(choices=THUMBS, required=False)
    outcome = serializers.ChoiceField(choices=OUTCOMES, required=False)
    note = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        given = [name for name in ("thumbs", "outcome") if name in attrs]
        if len(given) != 1:
            raise serializers.ValidationError(
                "give exactly one of `thumbs` (up or down) and `outcome` (success or failure)"
            )
        attrs["value"] = FeedbackValue(attrs[given[0]])
        return attrs


class FeedbackOutput(serializers.ModelSerializer[Feedback]):
    id = serializers.CharField(source="sample.rid")
    arm = serializers.CharField(source="sample.arm")
    rollout = serializers.IntegerField(source="sample.rollout_id", allow_null=True)
    step = serializers.IntegerField(source="sample.step", allow_null=True)

    class Meta:
        model = Feedback
        fields = ["id", "value", "note", "arm", "rollout", "step", "created_at", "updated_at"]
