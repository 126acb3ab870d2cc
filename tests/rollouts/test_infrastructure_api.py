"""Fleets, replicas, deployments and routes through the API, on real (simulated) replicas: what a
pipeline does before it starts a rollout, and the refusals that keep traffic safe."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.utils import timezone
from rest_framework.test import APIClient

from core.models import AuditEvent
from rollouts.choices import DeploymentState
from rollouts.models import Deployment, Fleet, Replica, Route
from rollouts.services.deployments import deployment_prepare
from tenants.choices import Scope
from tenants.models import Tenant, User
from tenants.services.accounts import api_token_create
from tests.registry.factories import register
from tests.simfleet.harness import Fleet as SimFleet
from tests.simfleet.harness import FleetLauncher, model, request

ADAPTER_PATH = "/models/support-chat/v2-lora"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimFleet]:
    launcher = FleetLauncher(tmp_path)
    yield launcher.start([model(adapters={ADAPTER_PATH: {}})], replicas=2)
    launcher.stop_all()


@pytest.fixture
def pipeline(ci_user: User) -> APIClient:
    scopes = [Scope.ROLLOUTS_READ, Scope.ROLLOUTS_WRITE]
    _, secret = api_token_create(actor=None, user=ci_user, name="infra", scopes=scopes)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def post(client: APIClient, path: str, body: dict[str, Any] | None = None) -> Any:
    return client.post(f"/api/v1/{path}", body or {}, format="json")


def fleet_with_replicas(client: APIClient, sim: SimFleet) -> None:
    created = post(
        client,
        "fleets",
        {"name": "sim", "provider": "simfleet", "gpu_type": "L4", "dollars_per_gpu_hour": "0.80"},
    )
    assert created.status_code == 201, created.json()
    for index, url in enumerate(sim.urls):
        added = post(client, "fleets/sim/replicas", {"name": f"r{index}", "base_url": url})
        assert added.status_code == 201, added.json()


def test_a_pipeline_builds_a_fleet_deploys_an_adapter_and_opens_a_route(
    pipeline: APIClient, sim: SimFleet, redis_client: redis.Redis
) -> None:
    fleet_with_replicas(pipeline, sim)
    register(version="v1")
    register(version="v2", uri=ADAPTER_PATH, format="lora_adapter")
    base = post(
        pipeline,
        "deployments",
        {"artifact": "support-chat:v1", "fleet": "sim", "served_model_name": "tiny"},
    )
    adapter = post(
        pipeline,
        "deployments",
        {
            "artifact": "support-chat:v2",
            "fleet": "sim",
            "served_model_name": "support-chat-v2",
            "kind": "lora",
            "max_model_len": 1024,
        },
    )
    assert base.status_code == adapter.status_code == 201, adapter.json()
    assert adapter.json()["state"] == "pending"
    # What the workers do within seconds of the create (tests/e2e runs them for real).
    for body in (base.json(), adapter.json()):
        assert deployment_prepare(deployment_id=body["id"]) == "ready"
    watched = pipeline.get(f"/api/v1/deployments/{adapter.json()['id']}").json()
    assert (watched["state"], watched["problems"]) == ("ready", [])
    for url in sim.urls:  # the adapter was loaded on every replica through the runtime API
        ids = [m["id"] for m in request("GET", f"{url}/v1/models").json()["data"]]
        assert "support-chat-v2" in ids

    Tenant.objects.create(slug="acme", name="Acme")
    route = post(
        pipeline,
        "routes",
        {"name": "support-chat", "baseline_deployment": base.json()["id"], "tenants": ["acme"]},
    )
    assert route.status_code == 201, route.json()
    assert route.json()["baseline"]["artifact"] == "support-chat:v1"
    assert route.json()["tenants"] == ["acme"]
    listed = pipeline.get("/api/v1/fleets").json()
    assert [r["name"] for r in listed[0]["replicas"]] == ["r0", "r1"]
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"fleet.created", "replica.added", "deployment.created", "deployment.ready"} <= actions
    assert "route.created" in actions


def test_a_deployment_that_cannot_load_stays_pending_with_its_problems_then_fails(
    pipeline: APIClient, sim: SimFleet, redis_client: redis.Redis
) -> None:
    fleet_with_replicas(pipeline, sim)
    register(version="v3", uri="/nowhere/adapter", format="lora_adapter")
    created = post(
        pipeline,
        "deployments",
        {"artifact": "support-chat:v3", "fleet": "sim", "served_model_name": "v3", "kind": "lora"},
    ).json()
    assert deployment_prepare(deployment_id=created["id"]) == "pending"
    pending = pipeline.get(f"/api/v1/deployments/{created['id']}").json()
    assert len(pending["problems"]) >= 2  # one line a replica at least
    later = timezone.now() + dt.timedelta(hours=1)
    assert deployment_prepare(deployment_id=created["id"], now=later) == "failed"
    assert AuditEvent.objects.filter(action="deployment.failed").exists()


def test_nothing_that_serves_traffic_is_deleted_and_the_refusal_says_what_uses_it(
    pipeline: APIClient, sim: SimFleet, redis_client: redis.Redis
) -> None:
    fleet_with_replicas(pipeline, sim)
    register(version="v1")
    base = post(
        pipeline,
        "deployments",
        {"artifact": "support-chat:v1", "fleet": "sim", "served_model_name": "tiny"},
    ).json()
    deployment_prepare(deployment_id=base["id"])
    post(pipeline, "routes", {"name": "chat", "baseline_deployment": base["id"]})

    in_use = pipeline.delete(f"/api/v1/deployments/{base['id']}")
    assert in_use.status_code == 409
    assert "route chat (baseline)" in in_use.json()["detail"]
    fleet = pipeline.delete("/api/v1/fleets/sim")
    assert fleet.status_code == 409
    assert "still has deployments" in fleet.json()["detail"]
    active = pipeline.delete("/api/v1/fleets/sim/replicas/r0")
    assert active.status_code == 409
    assert "drain it first" in active.json()["detail"]

    drained = post(pipeline, "fleets/sim/replicas/r0/drain")
    assert drained.json()["state"] == "draining"
    assert pipeline.delete("/api/v1/fleets/sim/replicas/r0").status_code == 204
    assert list(Replica.objects.values_list("name", flat=True)) == ["r1"]
    assert pipeline.delete("/api/v1/routes/chat").status_code == 204
    retired = pipeline.delete(f"/api/v1/deployments/{base['id']}")
    assert retired.status_code == 200
    assert retired.json()["state"] == "retired"
    kept = pipeline.delete("/api/v1/fleets/sim")
    assert kept.status_code == 409
    assert "history" in kept.json()["detail"]


def test_bad_infrastructure_input_is_a_clear_400_and_writes_nothing(
    pipeline: APIClient, redis_client: redis.Redis
) -> None:
    Fleet.objects.create(name="gpu-a")
    register(version="v1")
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("fleets", {"name": "Bad Name"}, "name"),
        ("fleets", {"name": "x", "provider": "kubernetes"}, "provider"),
        ("fleets", {"name": "x", "dollars_per_gpu_hour": "-1"}, "dollars_per_gpu_hour"),
        ("fleets/gpu-a/replicas", {"name": "r0", "base_url": "not a url"}, "base_url"),
        (
            "deployments",
            {"artifact": "nope", "fleet": "gpu-a", "served_model_name": "m"},
            "artifact",
        ),
        (
            "deployments",
            {"artifact": "support-chat:v9", "fleet": "gpu-a", "served_model_name": "m"},
            "no artifact support-chat:v9",
        ),
        (
            "deployments",
            {"artifact": "support-chat:v1", "fleet": "nowhere", "served_model_name": "m"},
            "no fleet named 'nowhere'",
        ),
        ("routes", {"name": "chat", "baseline_deployment": 999}, "no deployment 999"),
    ]
    for path, body, message in cases:
        response = post(pipeline, path, body)
        assert response.status_code == 400, (path, body, response.json())
        assert message in str(response.json()), response.json()
    pending = Deployment.objects.create(
        artifact=register(version="v2"), fleet=Fleet.objects.get(), served_model_name="p"
    )
    not_ready = post(pipeline, "routes", {"name": "chat", "baseline_deployment": pending.pk})
    assert "is pending" in not_ready.json()["detail"]
    duplicate = post(pipeline, "fleets", {"name": "gpu-a"})
    assert duplicate.status_code == 409
    assert (Fleet.objects.count(), Route.objects.count(), Replica.objects.count()) == (1, 0, 0)


def test_tenant_admins_see_no_fleet_and_viewers_change_nothing(
    tenant_a_admin: User, viewer: User, redis_client: redis.Redis
) -> None:
    Fleet.objects.create(name="gpu-a")
    admin = APIClient()
    admin.force_login(tenant_a_admin)
    assert admin.get("/api/v1/fleets").json() == []
    assert admin.get("/api/v1/fleets/gpu-a").status_code == 404
    watcher = APIClient()
    watcher.force_login(viewer)
    assert [f["name"] for f in watcher.get("/api/v1/fleets").json()] == ["gpu-a"]
    assert post(watcher, "fleets", {"name": "x"}).status_code == 403
    assert watcher.delete("/api/v1/fleets/gpu-a").status_code == 403
    assert Fleet.objects.count() == 1
    assert Deployment.objects.filter(state=DeploymentState.READY).count() == 0


def test_deploying_the_same_artifact_again_returns_the_live_deployment(
    pipeline: APIClient, redis_client: redis.Redis
) -> None:
    Fleet.objects.create(name="gpu-a")
    register(version="v1")
    register(version="v2")
    body = {"artifact": "support-chat:v1", "fleet": "gpu-a", "served_model_name": "chat"}
    first = post(pipeline, "deployments", body)
    again = post(pipeline, "deployments", body)
    assert first.status_code == 201
    assert again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    other = post(pipeline, "deployments", {**body, "artifact": "support-chat:v2"})
    assert other.status_code == 409
    assert "by support-chat:v1" in other.json()["detail"]
    assert Deployment.objects.count() == 1


def test_review_findings_hold(
    pipeline: APIClient, tenant_a_admin: User, redis_client: redis.Redis
) -> None:
    fleet = Fleet.objects.create(name="gpu-a")
    fleet.replicas.create(name="r0", base_url="http://10.0.0.7:8000")
    serving = Deployment.objects.create(
        artifact=register(version="v1"),
        fleet=fleet,
        served_model_name="chat",
        state="ready",
        problems=["r0: HTTPConnectionPool(host='10.0.0.7')"],
    )
    Route.objects.create(name="chat", baseline=serving)
    # A route name a URL cannot carry is refused, not stored to break the routes page.
    bad = post(pipeline, "routes", {"name": "chat\nx", "baseline_deployment": serving.pk})
    assert bad.status_code == 400
    assert "letters, digits" in bad.json()["detail"]
    assert (
        post(pipeline, "routes", {"name": "a/rules", "baseline_deployment": serving.pk}).status_code
        == 400
    )
    # The last active replica of a serving fleet is not drained away.
    drained = post(pipeline, "fleets/gpu-a/replicas/r0/drain")
    assert drained.status_code == 409
    assert "last active one" in drained.json()["detail"]
    # A tenant admin reads which version serves a route, not the fleet's hosts.
    admin = APIClient()
    admin.force_login(tenant_a_admin)
    shown = admin.get("/api/v1/routes/chat").json()["baseline"]
    assert (shown["artifact"], shown["fleet"], shown["problems"]) == ("support-chat:v1", "", [])
