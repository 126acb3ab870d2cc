"""The demo fleet (simfleet replicas started by `make up`), its deployment and route."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings

from registry.models import ModelArtifact
from rollouts.choices import DeploymentState, Provider
from rollouts.models import Deployment, Fleet, Replica, Route

FLEET = "simfleet-dev"
ROUTE = "support-chat"
REPLICAS = 2


def seed() -> dict[str, Any]:
    fleet, _ = Fleet.objects.get_or_create(
        name=FLEET,
        defaults={
            "provider": Provider.SIMFLEET,
            "gpu_type": "simulated H100",
            "dollars_per_gpu_hour": Decimal("2.50"),
        },
    )
    for index in range(REPLICAS):
        port = settings.SIMFLEET_BASE_PORT + index
        Replica.objects.update_or_create(
            fleet=fleet, name=f"r{index}", defaults={"base_url": f"http://127.0.0.1:{port}"}
        )
    production = ModelArtifact.objects.get(family="support-chat", version="v1")
    deployment = (
        Deployment.objects.filter(fleet=fleet, artifact=production)
        .exclude(state__in=[DeploymentState.RETIRED, DeploymentState.FAILED])
        .first()
    )
    if deployment is None:
        # The simfleet replicas that `make up` starts serve the model name "tiny".
        deployment = Deployment.objects.create(
            artifact=production,
            fleet=fleet,
            served_model_name="tiny",
            max_model_len=1024,  # simfleet's cpu-tiny profile
            state="ready",
        )
    Route.objects.get_or_create(name=ROUTE, defaults={"baseline": deployment, "salt": "demo"})
    return {"routes": [ROUTE], "fleet": FLEET}
