"""Unit cost per million tokens from the fleet's price and the throughput entered or observed, and
its way into the gateway's configuration (and so into every request record's cost)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from django.test import Client
from pytest_django.fixtures import Settings

from core.errors import PermissionDenied
from core.models import AuditEvent
from evaluation.costs import deployment_unit_cost, unit_cost_per_million
from evaluation.models import DeploymentCost
from evaluation.services import deployment_cost_set, deployment_costs_observe
from gateway.snapshot import SNAPSHOT_KEY, Snapshot
from orchestration.gateway_snapshot import publish_snapshot
from rollouts.models import Deployment, Route
from tenants.models import User
from tests.conftest import wait_for
from tests.factories import DeploymentFactory, FleetFactory, ReplicaFactory, RouteFactory
from tests.registry.factories import register
from tests.simfleet.harness import Fleet as SimFleet
from tests.simfleet.harness import FleetLauncher, model, request


def test_the_formula() -> None:
    # $2.50/GPU-hour x 2 GPUs / (1000 tokens/s x 0.5 x 3600 s) x 10^6 = $2.78 per million.
    dollars = unit_cost_per_million(
        dollars_per_gpu_hour=2.5, gpus=2, tokens_per_s=1000, utilisation=0.5
    )
    assert dollars == pytest.approx(5.0 / 1800 * 1e6 / 1000)
    assert unit_cost_per_million(dollars_per_gpu_hour=0, gpus=1, tokens_per_s=1, utilisation=1) == 0


def test_an_unknown_throughput_costs_nothing_rather_than_a_guess(route: Route) -> None:
    cost = deployment_unit_cost(route.baseline)
    assert (cost.dollars_per_million_tokens, cost.source) == (0.0, "unknown")


def test_an_entered_throughput_wins_over_the_observed_one(
    route: Route, release_manager: User, redis_client: redis.Redis
) -> None:
    DeploymentCost.objects.create(deployment=route.baseline, observed_tokens_per_s=50.0)
    deployment_cost_set(
        actor=release_manager,
        deployment=route.baseline,
        throughput_tokens_per_s=1000.0,
        utilisation=0.5,
    )
    baseline = Deployment.objects.select_related("fleet", "cost").get(pk=route.baseline_id)
    cost = deployment_unit_cost(baseline)
    assert cost.source == "entered"
    assert cost.dollars_per_million_tokens == pytest.approx(2.5 * 2 / (1000 * 0.5 * 3600) * 1e6)
    assert AuditEvent.objects.filter(action="evaluation.cost_set").count() == 1


def test_only_release_managers_set_costs(route: Route, viewer: User) -> None:
    with pytest.raises(PermissionDenied):
        deployment_cost_set(
            actor=viewer, deployment=route.baseline, throughput_tokens_per_s=1.0, utilisation=1.0
        )


def test_the_gateway_snapshot_carries_each_deployments_unit_cost(
    route: Route, redis_client: redis.Redis
) -> None:
    DeploymentCost.objects.create(
        deployment=route.baseline, throughput_tokens_per_s=2000.0, utilisation=0.25
    )
    publish_snapshot()
    snapshot = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or "")
    published = snapshot.deployments[str(route.baseline_id)].cost_per_million_tokens
    assert published == pytest.approx(2.5 * 2 / (2000 * 0.25 * 3600) * 1e6)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimFleet]:
    launcher = FleetLauncher(tmp_path)
    yield launcher.start([model(speed={"step_base_ms": 2})], replicas=1)
    launcher.stop_all()


# A beat task: it writes in autocommit, so its publication runs at once, as in production.
@pytest.mark.django_db(transaction=True)
def test_the_observed_throughput_comes_from_prometheus(
    sim: SimFleet,
    prometheus_factory: Callable[[list[str]], str],
    settings: Settings,
    db: None,
    redis_client: redis.Redis,
) -> None:
    settings.PROMETHEUS_URL = prometheus_factory([u.removeprefix("http://") for u in sim.urls])
    fleet = FleetFactory.create(name="sim", dollars_per_gpu_hour=4)
    ReplicaFactory.create(fleet=fleet, name="r0", base_url=sim.urls[0])
    deployment = DeploymentFactory.create(
        artifact=register(), fleet=fleet, served_model_name="tiny", state="ready"
    )
    RouteFactory.create(name="chat", baseline=deployment)

    def served_some() -> bool:
        request(
            "POST",
            f"{sim.urls[0]}/v1/completions",
            {"model": "tiny", "prompt": "hi", "max_tokens": 20},
        )
        deployment_costs_observe()
        cost = DeploymentCost.objects.filter(deployment=deployment).first()
        return cost is not None and (cost.observed_tokens_per_s or 0) > 0

    wait_for(served_some, seconds=30)
    stored = Deployment.objects.select_related("fleet", "cost").get(pk=deployment.pk)
    unit = deployment_unit_cost(stored)
    assert unit.source == "observed"
    assert unit.dollars_per_million_tokens > 0
    snapshot = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or "")
    assert snapshot.deployments[str(deployment.pk)].cost_per_million_tokens == pytest.approx(
        unit.dollars_per_million_tokens, rel=0.06
    )


def test_prometheus_away_leaves_costs_as_they_were(
    route: Route, settings: Settings, redis_client: redis.Redis
) -> None:
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    assert deployment_costs_observe() == 0
    assert not DeploymentCost.objects.exists()


def test_a_release_manager_enters_a_throughput_in_the_admin_and_it_is_audited(
    client: Client, route: Route, release_manager: User, redis_client: redis.Redis
) -> None:
    client.force_login(release_manager)
    response = client.post(
        "/admin/evaluation/deploymentcost/add/",
        {"deployment": route.baseline_id, "throughput_tokens_per_s": "1500", "utilisation": "0.5"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    cost = DeploymentCost.objects.get(deployment=route.baseline)
    assert (cost.throughput_tokens_per_s, cost.utilisation) == (1500.0, 0.5)
    assert AuditEvent.objects.get(action="evaluation.cost_set").actor == release_manager
