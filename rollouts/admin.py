from django.contrib import admin

from rollouts.models import Deployment, Fleet, Replica, Route


class ReplicaInline(admin.TabularInline[Replica, Fleet]):
    model = Replica
    extra = 0


@admin.register(Fleet)
class FleetAdmin(admin.ModelAdmin[Fleet]):
    list_display = ["name", "provider", "gpu_type", "gpus_per_replica", "dollars_per_gpu_hour"]
    inlines = [ReplicaInline]


@admin.register(Replica)
class ReplicaAdmin(admin.ModelAdmin[Replica]):
    list_display = ["name", "fleet", "base_url", "state", "healthy", "last_probe_at"]
    list_filter = ["fleet", "state", "healthy"]


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin[Deployment]):
    list_display = ["artifact", "fleet", "served_model_name", "kind", "state", "created_at"]
    list_filter = ["state", "kind", "fleet"]
    raw_id_fields = ["artifact"]


@admin.register(Route)
class RouteAdmin(admin.ModelAdmin[Route]):
    list_display = ["name", "baseline", "canary", "canary_weight", "stickiness"]
    filter_horizontal = ["tenants"]
