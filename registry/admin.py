from django.contrib import admin

from registry.models import (
    Alias,
    AliasMove,
    EvalRun,
    EvalScore,
    GateOverride,
    LineageEdge,
    ModelArtifact,
    PromotionGate,
)


@admin.register(ModelArtifact)
class ModelArtifactAdmin(admin.ModelAdmin[ModelArtifact]):
    list_display = ["family", "version", "format", "digest", "created_at"]
    list_filter = ["format", "family"]
    search_fields = ["family", "version", "uri", "digest"]
    # The digest is the artifact's identity: fixed once registered.
    readonly_fields = ["digest", "created_at", "created_by"]


@admin.register(LineageEdge)
class LineageEdgeAdmin(admin.ModelAdmin[LineageEdge]):
    list_display = ["child", "relation", "parent", "created_at"]
    list_filter = ["relation"]
    raw_id_fields = ["child", "parent"]


class EvalScoreInline(admin.TabularInline[EvalScore, EvalRun]):
    model = EvalScore
    extra = 0


@admin.register(EvalRun)
class EvalRunAdmin(admin.ModelAdmin[EvalRun]):
    list_display = ["artifact", "suite", "source", "evaluated_at", "created_at"]
    list_filter = ["source", "suite"]
    raw_id_fields = ["artifact"]
    inlines = [EvalScoreInline]


@admin.register(Alias)
class AliasAdmin(admin.ModelAdmin[Alias]):
    list_display = ["family", "name", "artifact", "updated_at"]
    # Moves go through the service, which keeps the history and the audit trail.
    readonly_fields = ["family", "name", "artifact", "updated_at"]

    def has_add_permission(self, request: object) -> bool:
        return False


@admin.register(AliasMove)
class AliasMoveAdmin(admin.ModelAdmin[AliasMove]):
    list_display = ["family", "name", "from_artifact", "to_artifact", "actor_name", "created_at"]
    readonly_fields = [f.name for f in AliasMove._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False


@admin.register(PromotionGate)
class PromotionGateAdmin(admin.ModelAdmin[PromotionGate]):
    list_display = ["family", "task", "metric", "filter", "min_value", "max_regression"]
    list_filter = ["family"]


@admin.register(GateOverride)
class GateOverrideAdmin(admin.ModelAdmin[GateOverride]):
    list_display = ["artifact", "actor", "created_at"]
    readonly_fields = [f.name for f in GateOverride._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False
