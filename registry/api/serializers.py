from __future__ import annotations

from typing import Any

from rest_framework import serializers

from registry.choices import ArtifactFormat, Relation, Verdict
from registry.models import AliasMove, ModelArtifact
from registry.selectors import Delta, GateResult, ScoreRow


class ArtifactRegisterInput(serializers.Serializer[dict[str, Any]]):
    family = serializers.SlugField(max_length=100)
    version = serializers.RegexField(r"^[A-Za-z0-9._+-]{1,100}$", help_text="e.g. v3, 2026.11.30")
    uri = serializers.CharField(max_length=1000, help_text="local path, s3://…, hf://…")
    digest = serializers.CharField(max_length=71, help_text="sha256 hex, optionally 'sha256:'")
    format = serializers.ChoiceField(choices=ArtifactFormat.choices)
    size_bytes = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    served_model_name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    training_data_version = serializers.CharField(max_length=200, required=False, allow_blank=True)
    code_revision = serializers.CharField(max_length=200, required=False, allow_blank=True)
    metadata = serializers.DictField(required=False)


class ArtifactOutput(serializers.ModelSerializer[ModelArtifact]):
    aliases = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)

    class Meta:
        model = ModelArtifact
        fields = [
            "family",
            "version",
            "uri",
            "digest",
            "format",
            "size_bytes",
            "served_model_name",
            "training_data_version",
            "code_revision",
            "metadata",
            "created_by",
            "created_at",
            "aliases",
        ]

    def get_aliases(self, artifact: ModelArtifact) -> list[str]:
        return [alias.name for alias in artifact.aliases.all()]


class ParentInput(serializers.Serializer[dict[str, Any]]):
    family = serializers.SlugField()
    version = serializers.CharField(max_length=100)
    relation = serializers.ChoiceField(choices=Relation.choices)


class LineageAddInput(serializers.Serializer[dict[str, Any]]):
    parents = ParentInput(many=True, allow_empty=False)


class ModelCardInput(serializers.Serializer[dict[str, Any]]):
    card = serializers.CharField(max_length=200_000, help_text="the README.md with front matter")


class EdgeOutput(serializers.Serializer[dict[str, Any]]):
    child = serializers.CharField()
    parent = serializers.CharField()  # type: ignore[assignment] # a field, not Field.parent
    relation = serializers.CharField()
    depth = serializers.IntegerField()


class LineageOutput(serializers.Serializer[dict[str, Any]]):
    artifact = serializers.CharField()
    ancestors = EdgeOutput(many=True)
    descendants = EdgeOutput(many=True)


class DeltaOutput(serializers.Serializer[Delta]):
    other = serializers.FloatField(allow_null=True)
    delta = serializers.FloatField(allow_null=True)
    verdict = serializers.ChoiceField(choices=Verdict.choices)


class ScoreRowOutput(serializers.Serializer[ScoreRow]):
    task = serializers.CharField(source="score.task")
    metric = serializers.CharField(source="score.metric")
    filter = serializers.CharField(source="score.filter")
    value = serializers.FloatField(source="score.value", allow_null=True)
    stderr = serializers.FloatField(source="score.stderr", allow_null=True)
    higher_is_better = serializers.BooleanField(source="score.higher_is_better", allow_null=True)
    n_shot = serializers.IntegerField(source="score.n_shot", allow_null=True)
    raw = serializers.JSONField(source="score.raw")
    vs_parent = DeltaOutput(allow_null=True)
    vs_production = DeltaOutput(allow_null=True)


class ComparisonOutput(serializers.Serializer[dict[str, Any]]):
    artifact = serializers.CharField()
    parent = serializers.CharField(allow_null=True)  # type: ignore[assignment] # a field, not Field.parent
    production = serializers.CharField(allow_null=True)
    scores = ScoreRowOutput(many=True)


class EvalRunOutput(serializers.Serializer[dict[str, Any]]):
    run = serializers.IntegerField()
    suite = serializers.CharField()
    scores = serializers.IntegerField()


class AliasMoveInput(serializers.Serializer[dict[str, Any]]):
    version = serializers.CharField(max_length=100)
    reason = serializers.CharField(max_length=2000)


class AliasMoveOutput(serializers.ModelSerializer[AliasMove]):
    from_version = serializers.CharField(source="from_artifact.version", default=None)
    to_version = serializers.CharField(source="to_artifact.version")

    class Meta:
        model = AliasMove
        fields = ["name", "from_version", "to_version", "actor_name", "reason", "created_at"]


class AliasOutput(serializers.Serializer[dict[str, Any]]):
    family = serializers.CharField()
    name = serializers.CharField()
    version = serializers.CharField()
    history = AliasMoveOutput(many=True)


class GateInput(serializers.Serializer[dict[str, Any]]):
    task = serializers.CharField(max_length=200)
    metric = serializers.CharField(max_length=100)
    filter = serializers.CharField(max_length=100, default="none")
    min_value = serializers.FloatField(required=False, allow_null=True, default=None)
    max_regression = serializers.FloatField(
        required=False, allow_null=True, default=None, min_value=0
    )


class GatesInput(serializers.Serializer[dict[str, Any]]):
    gates = GateInput(many=True)


class GateResultOutput(serializers.Serializer[GateResult]):
    task = serializers.CharField(source="gate.task")
    metric = serializers.CharField(source="gate.metric")
    filter = serializers.CharField(source="gate.filter")
    min_value = serializers.FloatField(source="gate.min_value", allow_null=True)
    max_regression = serializers.FloatField(source="gate.max_regression", allow_null=True)
    value = serializers.FloatField(allow_null=True)
    production_value = serializers.FloatField(allow_null=True)
    passed = serializers.BooleanField()
    reason = serializers.CharField()


class GateReportOutput(serializers.Serializer[dict[str, Any]]):
    artifact = serializers.CharField()
    passed = serializers.BooleanField()
    overridden = serializers.BooleanField()
    results = GateResultOutput(many=True)


class GateOverrideInput(serializers.Serializer[dict[str, Any]]):
    reason = serializers.CharField(min_length=10, max_length=4000)
