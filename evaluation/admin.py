"""Where release managers enter what a deployment's replicas sustain (its unit cost follows), and
read stored verdicts. Samples and feedback are measurements: not edited here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from evaluation.models import DeploymentCost, Verdict
from evaluation.services import deployment_cost_set
from tenants.models import User


@admin.register(DeploymentCost)
class DeploymentCostAdmin(admin.ModelAdmin[DeploymentCost]):
    list_display = [
        "deployment",
        "throughput_tokens_per_s",
        "utilisation",
        "observed_tokens_per_s",
        "observed_at",
    ]
    readonly_fields = ["observed_tokens_per_s", "observed_at", "updated_at"]
    raw_id_fields = ["deployment"]

    def save_model(
        self, request: HttpRequest, obj: DeploymentCost, form: Any, change: bool
    ) -> None:
        # Through the service: audited, and the gateway's unit cost is republished.
        actor = request.user if isinstance(request.user, User) else None
        deployment_cost_set(
            actor=actor,
            deployment=obj.deployment,
            throughput_tokens_per_s=obj.throughput_tokens_per_s,
            utilisation=obj.utilisation,
        )


@admin.register(Verdict)
class VerdictAdmin(admin.ModelAdmin[Verdict]):
    list_display = ["rollout", "step", "looked_at", "final", "decision"]
    list_filter = ["decision", "final"]
    readonly_fields = [f.name for f in Verdict._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Verdict | None = None) -> bool:
        return False
