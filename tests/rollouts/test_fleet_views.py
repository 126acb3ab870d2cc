"""The fleets page and the new-route form: release managers build what a rollout needs without the
Django admin; viewers read; tenant admins are not let in."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path

import redis
from django.test import Client
from pytest_django.fixtures import Settings as SettingsWrapper

from core.models import AuditEvent
from rollouts.models import Deployment, Fleet, Replica, Route
from tenants.models import Tenant, User
from tests.conftest import free_port, wait_for
from tests.factories import DeploymentFactory, FleetFactory, ReplicaFactory, RouteFactory
from tests.registry.factories import register
from tests.simfleet.harness import FleetLauncher, model


def page(client: Client) -> str:
    return html.unescape(client.get("/rollouts/fleets/").content.decode())


def test_a_release_manager_builds_a_fleet_and_deploys_on_it(
    client: Client, release_manager: User, redis_client: redis.Redis
) -> None:
    client.force_login(release_manager)
    made = client.post(
        "/rollouts/fleets/new/",
        {
            "name": "l4-pool",
            "provider": "static",
            "gpu_type": "L4",
            "gpus_per_replica": "1",
            "dollars_per_gpu_hour": "0.8",
        },
    )
    assert made.status_code == 302
    added = client.post(
        "/rollouts/fleets/l4-pool/replicas/", {"name": "r0", "base_url": "http://10.0.0.7:8000"}
    )
    assert added.status_code == 302
    artifact = register(version="v1")
    deployed = client.post(
        "/rollouts/deployments/new/",
        {
            "artifact": artifact.pk,
            "fleet": "l4-pool",
            "served_model_name": "support-chat",
            "kind": "full",
        },
    )
    assert deployed.status_code == 302
    deployment = Deployment.objects.get()
    assert deployment.state == "pending"
    shown = page(client)
    assert 'data-fleet="l4-pool"' in shown
    assert "http://10.0.0.7:8000" in shown
    assert 'hx-trigger="every 5s"' in shown  # the page watches the deployment get ready
    assert client.post("/rollouts/fleets/l4-pool/replicas/r0/drain/").status_code == 302
    assert Replica.objects.get().state == "draining"
    assert client.post("/rollouts/fleets/l4-pool/replicas/r0/remove/").status_code == 302
    assert not Replica.objects.exists()
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"fleet.created", "replica.added", "replica.draining", "replica.removed"} <= actions


def test_refusals_and_bad_input_are_shown_on_the_page(
    client: Client, release_manager: User, redis_client: redis.Redis
) -> None:
    fleet = FleetFactory.create(name="busy")
    ReplicaFactory.create(fleet=fleet, name="r0", base_url="http://10.0.0.8:8000")
    baseline = DeploymentFactory.create(fleet=fleet, state="ready")
    RouteFactory.create(name="chat", baseline=baseline)
    client.force_login(release_manager)
    refused = client.post("/rollouts/fleets/busy/replicas/r0/remove/")
    assert refused.status_code == 409
    assert "drain it first" in html.unescape(refused.content.decode())
    in_use = client.post(f"/rollouts/deployments/{baseline.pk}/delete/")
    assert in_use.status_code == 409
    assert "route chat (baseline)" in html.unescape(in_use.content.decode())
    bad = client.post("/rollouts/fleets/new/", {"name": "Not a slug", "gpus_per_replica": "0"})
    assert bad.status_code == 400
    assert client.post("/rollouts/fleets/busy/replicas/r0/explode/").status_code == 404
    assert Replica.objects.count() == 1
    assert Fleet.objects.count() == 1


def test_a_route_is_created_on_a_ready_baseline_for_some_tenants(
    client: Client, release_manager: User, redis_client: redis.Redis
) -> None:
    ready = DeploymentFactory.create(state="ready")
    pending = DeploymentFactory.create(state="pending")
    Tenant.objects.create(slug="acme", name="Acme")
    client.force_login(release_manager)
    listing = client.get("/rollouts/routes/").content.decode()
    assert f'value="{ready.pk}"' in listing
    assert f'value="{pending.pk}"' not in listing  # only ready deployments are offered
    created = client.post(
        "/rollouts/routes/new/",
        {"name": "support-chat", "baseline": ready.pk, "stickiness": "user", "tenants": ["acme"]},
    )
    assert created.status_code == 302
    route = Route.objects.get()
    assert list(route.tenants.values_list("slug", flat=True)) == ["acme"]
    reserved = client.post(
        "/rollouts/routes/new/", {"name": "new", "baseline": ready.pk, "stickiness": "user"}
    )
    assert reserved.status_code == 400
    assert "is reserved" in html.unescape(reserved.content.decode())


def test_viewers_read_and_tenant_admins_are_kept_out(
    client: Client, viewer: User, tenant_a_admin: User
) -> None:
    FleetFactory.create(name="gpu-a")
    client.force_login(viewer)
    shown = page(client)
    assert 'data-fleet="gpu-a"' in shown
    assert "Create fleet" not in shown
    assert client.post("/rollouts/fleets/new/", {"name": "x"}).status_code == 403
    client.force_login(tenant_a_admin)
    assert client.get("/rollouts/fleets/").status_code == 403
    assert Fleet.objects.count() == 1


def test_the_forms_need_their_csrf_token(release_manager: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(release_manager)
    assert client.post("/rollouts/fleets/new/", {"name": "x"}).status_code == 403
    assert not Fleet.objects.exists()


def test_each_replica_shows_its_engines_gauges_from_prometheus(
    client: Client,
    viewer: User,
    settings: SettingsWrapper,
    prometheus_factory: Callable[[list[str]], str],
    tmp_path: Path,
) -> None:
    launcher = FleetLauncher(tmp_path)
    try:
        sim = launcher.start([model()])
        address = sim.url.removeprefix("http://")
        settings.PROMETHEUS_URL = prometheus_factory([address])
        fleet = FleetFactory.create(name="sim")
        ReplicaFactory.create(fleet=fleet, name="r0", base_url=sim.url)
        ReplicaFactory.create(fleet=fleet, name="r1", base_url="http://127.0.0.1:9")  # unscraped
        client.force_login(viewer)

        def row(name: str) -> str:
            return page(client).split(f'data-replica="{name}"', 1)[1].split("</tr>", 1)[0]

        gauges = ("kv_cache_usage", "running", "waiting", "preemptions_per_min")

        def shown() -> bool:
            return all(re.search(rf'data-gauge="{g}">\d', row("r0")) for g in gauges)

        # A rate needs two scrapes (one a second) before it has a value.
        wait_for(shown, seconds=30)
        assert "not scraped" in row("r1")
    finally:
        launcher.stop_all()


def test_the_fleet_page_says_so_when_prometheus_is_away(
    client: Client, viewer: User, settings: SettingsWrapper
) -> None:
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    ReplicaFactory.create(fleet=FleetFactory.create(name="sim"), name="r0")
    client.force_login(viewer)
    response = client.get("/rollouts/fleets/")
    assert response.status_code == 200
    assert "Prometheus did not answer" in html.unescape(response.content.decode())
