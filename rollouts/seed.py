"""The demo fleets (the simfleet replicas `make up` starts), deployments and route.

Fleet a serves the production version (support-chat v1), fleet b the candidate (v2) and fleet c
a second copy of v1, the control arm, each on three simfleet replicas of its own (three, not two:
the judge reads how replicas differ from each arm's replicas, and with two an arm that is two
degrees of freedom, which the 50% step paid for in samples): `manage.py demo_canary` walks a
live canary between them with the "demo" plan template, the control carrying the canary's share
of traffic so that the candidate's latencies are compared with v1's at the same load from the
first step.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings

from registry.models import ModelArtifact
from rollouts.choices import DeploymentState, Provider
from rollouts.models import Deployment, Fleet, PlanTemplate, Replica, Route
from rollouts.plans import DEFAULT_PLAN, Plan, SloGates, Step
from rollouts.services.templates import plan_template_create
from tenants.models import User

ROUTE = "support-chat"
# (fleet, version deployed there); fleet i's replicas listen on SIMFLEET_BASE_PORT +
# REPLICAS_PER_FLEET * i + 0, 1, ...
FLEETS = [("simfleet-a", "v1"), ("simfleet-b", "v2"), ("simfleet-c", "v1")]
REPLICAS_PER_FLEET = 3
BASELINE_FLEET, CANDIDATE_FLEET, CONTROL_FLEET = (name for name, *_ in FLEETS)
# Short bakes so a person watching sees every step within a few minutes. The 50% step is the
# last one the A/B judge compares, and before promotion it must show the candidate no worse
# within the pass margins: how many samples that takes is the judge's to say (the engine waits
# at the step's end while a blocking metric leans to passing), so no step asks for more than the
# default plan's floor.
DEMO_PLAN = Plan(
    steps=(
        Step(weight=5, min_bake_s=20, min_samples=20),
        Step(weight=25, min_bake_s=20, min_samples=20),
        Step(weight=50, min_bake_s=30, min_samples=200),
        Step(weight=100, min_bake_s=20, min_samples=20),
    )
)
TEMPLATES = [
    ("standard", DEFAULT_PLAN, SloGates(), "5 → 25 → 50 → 100 %, five minutes a step."),
    ("demo", DEMO_PLAN, SloGates(ttft_p95_ms=1000, tpot_p95_ms=100), "The demo canary."),
]


def _deployment(fleet: Fleet, artifact: ModelArtifact) -> Deployment:
    # simfleet's models count tokens with simfleet's tokenizer.
    tokenizer_dir = str(settings.BASE_DIR / "simfleet" / "tokenizer")
    live = Deployment.objects.filter(fleet=fleet, artifact=artifact).exclude(
        state__in=[DeploymentState.RETIRED, DeploymentState.FAILED]
    )
    live.filter(tokenizer_dir="").update(tokenizer_dir=tokenizer_dir)  # seeded before it existed
    return live.first() or Deployment.objects.create(
        artifact=artifact,
        fleet=fleet,
        served_model_name="tiny",  # what simfleet's cpu-tiny profile serves
        max_model_len=1024,
        tokenizer_dir=tokenizer_dir,
        state=DeploymentState.READY,
    )


def seed() -> dict[str, Any]:
    deployments = {}
    for index, (name, version) in enumerate(FLEETS):
        fleet, _ = Fleet.objects.get_or_create(
            name=name,
            defaults={
                "provider": Provider.SIMFLEET,
                "gpu_type": "simulated H100",
                "dollars_per_gpu_hour": Decimal("2.50"),
            },
        )
        for number in range(REPLICAS_PER_FLEET):
            port = settings.SIMFLEET_BASE_PORT + REPLICAS_PER_FLEET * index + number
            Replica.objects.update_or_create(
                fleet=fleet, name=f"r{number}", defaults={"base_url": f"http://127.0.0.1:{port}"}
            )
        artifact = ModelArtifact.objects.get(family="support-chat", version=version)
        deployments[name] = _deployment(fleet, artifact)
    Route.objects.get_or_create(
        name=ROUTE, defaults={"baseline": deployments[BASELINE_FLEET], "salt": "demo"}
    )
    manager = User.objects.get(username="release")
    for name, plan, gates, description in TEMPLATES:
        if not PlanTemplate.objects.filter(name=name).exists():
            plan_template_create(
                actor=manager, name=name, plan=plan, gates=gates, description=description
            )
    return {
        "routes": [ROUTE],
        "candidate_deployment": deployments[CANDIDATE_FLEET].pk,
        "control_deployment": deployments[CONTROL_FLEET].pk,
        "plan_templates": [name for name, *_ in TEMPLATES],
    }
