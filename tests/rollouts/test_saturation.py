"""Saturation read from a real Prometheus scraping real (simulated) replicas."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from pytest_django.fixtures import Settings

from gateway.snapshot import SNAPSHOT_KEY, Snapshot
from rollouts.services.saturation import deployments_saturation_update
from tests.conftest import wait_for
from tests.factories import DeploymentFactory, FleetFactory, ReplicaFactory, RouteFactory
from tests.registry.factories import register
from tests.simfleet.harness import Fleet as SimFleet
from tests.simfleet.harness import FleetLauncher, model, request


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimFleet]:
    launcher = FleetLauncher(tmp_path)
    # A tiny KV cache that long answers fill, so usage is well above zero under load.
    yield launcher.start([model(kv_cache_tokens=2048, speed={"step_base_ms": 20})], replicas=2)
    launcher.stop_all()


# A beat task: it writes in autocommit, so its publication runs at once, as in production.
@pytest.mark.django_db(transaction=True)
def test_kv_cache_usage_and_queues_reach_the_deployment_and_the_gateway(
    sim: SimFleet,
    prometheus_factory: Callable[[list[str]], str],
    settings: Settings,
    db: None,
    redis_client: redis.Redis,
) -> None:
    settings.PROMETHEUS_URL = prometheus_factory([u.removeprefix("http://") for u in sim.urls])
    fleet = FleetFactory.create(name="sim")
    for index, url in enumerate(sim.urls):
        ReplicaFactory.create(fleet=fleet, name=f"r{index}", base_url=url)
    deployment = DeploymentFactory.create(
        artifact=register(), fleet=fleet, served_model_name="tiny", state="ready"
    )
    RouteFactory.create(name="chat", baseline=deployment)
    # Fill replica 1's cache: hung requests hold their KV cache and never finish.
    request("POST", f"{sim.urls[1]}/admin/faults", {"hang_rate": 1.0})

    def hang() -> None:
        with contextlib.suppress(OSError):
            request(
                "POST",
                f"{sim.urls[1]}/v1/completions",
                {"model": "tiny", "prompt": "word " * 400, "max_tokens": 100},
                timeout=8,
            )

    threads = [threading.Thread(target=hang) for _ in range(6)]
    for thread in threads:
        thread.start()

    def updated() -> bool:
        deployments_saturation_update()
        deployment.refresh_from_db()
        return deployment.kv_cache_usage > 0.5 and deployment.waiting_requests >= 1

    wait_for(updated, seconds=30)
    snapshot = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or "")
    assert snapshot.deployments[str(deployment.pk)].kv_cache_usage > 0.5
    for thread in threads:
        thread.join()
