from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Upper

from registry.choices import ArtifactFormat, EvalSource, Relation


class ModelArtifact(models.Model):
    """One version of a model family. The digest is its identity and never changes."""

    family = models.SlugField(max_length=100)
    version = models.CharField(max_length=100)
    uri = models.CharField(max_length=1000)
    digest = models.CharField(max_length=64)  # sha256, lower-case hex
    format = models.CharField(max_length=16, choices=ArtifactFormat.choices)
    size_bytes = models.BigIntegerField(null=True, blank=True)
    served_model_name = models.CharField(max_length=200, blank=True)
    training_data_version = models.CharField(max_length=200, blank=True)
    code_revision = models.CharField(max_length=200, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    parents = models.ManyToManyField(
        "self", through="LineageEdge", symmetrical=False, related_name="children"
    )

    class Meta:
        ordering = ["family", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["family", "version"], name="artifact_family_version")
        ]
        indexes = [
            models.Index(fields=["digest"]),
            models.Index(fields=["-created_at"]),
            # The list's search is `icontains` (UPPER(column) LIKE UPPER('%text%')) on these:
            # trigram indexes on the same expressions answer it without reading every row.
            # Without fastupdate, as artifacts are registered rarely: a search never has to read
            # a pending list of new entries that only a vacuum would fold into the index.
            *(
                GinIndex(
                    OpClass(Upper(name), name="gin_trgm_ops"),
                    name=f"artifact_{name}_trgm",
                    fastupdate=False,
                )
                for name in ("family", "version", "uri")
            ),
        ]

    def __str__(self) -> str:
        return f"{self.family}:{self.version}"


class LineageEdge(models.Model):
    child = models.ForeignKey(ModelArtifact, on_delete=models.CASCADE, related_name="parent_edges")
    parent = models.ForeignKey(ModelArtifact, on_delete=models.PROTECT, related_name="child_edges")
    relation = models.CharField(max_length=16, choices=Relation.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["child", "parent"], name="lineage_edge_unique"),
            models.CheckConstraint(condition=~Q(child=F("parent")), name="lineage_no_self_edge"),
        ]
        indexes = [models.Index(fields=["parent"])]

    def __str__(self) -> str:
        return f"{self.child} -[{self.relation}]-> {self.parent}"


class EvalRun(models.Model):
    artifact = models.ForeignKey(ModelArtifact, on_delete=models.CASCADE, related_name="eval_runs")
    source = models.CharField(max_length=16, choices=EvalSource.choices)
    suite = models.CharField(max_length=200, blank=True)
    harness_version = models.CharField(max_length=100, blank=True)
    evaluated_at = models.DateTimeField(null=True, blank=True)
    git_hash = models.CharField(max_length=64, blank=True)
    dataset_versions = models.JSONField(default=dict, blank=True)
    n_shot = models.JSONField(default=dict, blank=True)
    config = models.JSONField(default=dict, blank=True)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.suite or self.source} on {self.artifact}"


class EvalScore(models.Model):
    """One number of an eval run. NaN values and "N/A" errors are kept as such, not dropped:
    `value`/`stderr` are null then and `raw` holds what was uploaded."""

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="scores")
    task = models.CharField(max_length=200)
    metric = models.CharField(max_length=100)
    filter = models.CharField(max_length=100, default="none")
    value = models.FloatField(null=True, blank=True)
    stderr = models.FloatField(null=True, blank=True)
    higher_is_better = models.BooleanField(null=True, blank=True)
    n_shot = models.IntegerField(null=True, blank=True)
    raw = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["task", "metric", "filter"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "task", "metric", "filter"], name="eval_score_unique"
            )
        ]
        indexes = [models.Index(fields=["task", "metric"])]

    def __str__(self) -> str:
        return f"{self.task} {self.metric}={self.value}"


class Alias(models.Model):
    """A name (production, candidate, …) that points at one version of a family."""

    family = models.SlugField(max_length=100)
    name = models.SlugField(max_length=63)
    artifact = models.ForeignKey(ModelArtifact, on_delete=models.PROTECT, related_name="aliases")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["family", "name"]
        constraints = [models.UniqueConstraint(fields=["family", "name"], name="alias_unique")]

    def __str__(self) -> str:
        return f"{self.family}@{self.name}"


class AliasMove(models.Model):
    """The history of an alias: every move, with who made it and why."""

    family = models.SlugField(max_length=100)
    name = models.SlugField(max_length=63)
    from_artifact = models.ForeignKey(
        ModelArtifact, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    to_artifact = models.ForeignKey(ModelArtifact, on_delete=models.PROTECT, related_name="+")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150)
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["family", "name", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.family}@{self.name} -> {self.to_artifact_id}"


class PromotionGate(models.Model):
    """A family's bar for promotion: a minimum, or a maximum regression against production."""

    family = models.SlugField(max_length=100)
    task = models.CharField(max_length=200)
    metric = models.CharField(max_length=100)
    filter = models.CharField(max_length=100, default="none")
    min_value = models.FloatField(null=True, blank=True)
    max_regression = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["family", "task", "metric"]
        constraints = [
            models.UniqueConstraint(
                fields=["family", "task", "metric", "filter"], name="gate_unique"
            ),
            models.CheckConstraint(
                condition=Q(min_value__isnull=False) | Q(max_regression__isnull=False),
                name="gate_has_a_bar",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.family}: {self.task}/{self.metric}"


class GateOverride(models.Model):
    """A release manager's written decision to let an artifact that fails its gates roll out."""

    artifact = models.ForeignKey(ModelArtifact, on_delete=models.CASCADE, related_name="overrides")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField()
    failed_gates = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"override for {self.artifact_id}"
