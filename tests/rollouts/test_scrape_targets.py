"""Prometheus learns the replicas from Tollgate: a real Prometheus with `http_sd_configs` pointed
at the control plane scrapes a replica added through the API, with its fleet's labels, and stops
when it is drained."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_django.live_server_helper import LiveServer
from rest_framework.test import APIClient

from rollouts.models import Fleet
from tenants.choices import Scope
from tenants.models import User
from tenants.services.accounts import api_token_create
from tests.conftest import wait_for
from tests.simfleet.harness import Fleet as SimFleet
from tests.simfleet.harness import FleetLauncher, model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimFleet]:
    launcher = FleetLauncher(tmp_path)
    yield launcher.start([model()], replicas=2)
    launcher.stop_all()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 -- a local URL
        return json.load(response)


def scraped(prometheus: str) -> dict[str, dict[str, str]]:
    """The replicas Prometheus scrapes and finds up, by replica label."""
    targets = get_json(f"{prometheus}/api/v1/targets?state=active")["data"]["activeTargets"]
    return {t["labels"]["replica"]: t["labels"] for t in targets if t["health"] == "up"}


def test_a_replica_added_through_the_api_is_scraped_with_its_labels_until_drained(
    sim: SimFleet, release_manager: User, prometheus_sd: str
) -> None:
    _, secret = api_token_create(
        actor=None,
        user=release_manager,
        name="setup",
        scopes=[Scope.ROLLOUTS_READ, Scope.ROLLOUTS_WRITE],
    )
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    api.post("/api/v1/fleets", {"name": "sim", "provider": "simfleet"}, format="json")
    first, second = sim.urls
    api.post("/api/v1/fleets/sim/replicas", {"name": "r0", "base_url": first}, format="json")
    wait_for(lambda: "r0" in scraped(prometheus_sd), seconds=30)
    labels = scraped(prometheus_sd)["r0"]
    assert labels["fleet"] == "sim"
    assert labels["provider"] == "simfleet"
    assert labels["instance"] == first.removeprefix("http://")
    # vLLM's own metrics, read from the discovered replica.
    query = f"{prometheus_sd}/api/v1/query?query=vllm:num_requests_running"
    wait_for(lambda: bool(get_json(query)["data"]["result"]), seconds=15)

    api.post("/api/v1/fleets/sim/replicas", {"name": "r1", "base_url": second}, format="json")
    wait_for(lambda: "r1" in scraped(prometheus_sd), seconds=30)
    api.post("/api/v1/fleets/sim/replicas/r0/drain")
    wait_for(lambda: "r0" not in scraped(prometheus_sd), seconds=30)
    assert set(scraped(prometheus_sd)) == {"r1"}
    assert Fleet.objects.get().replicas.count() == 2


def test_the_targets_need_a_token_that_may_read_fleets(
    live_server: LiveServer, tenant_a_admin: User
) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        get_json(f"{live_server.url}/api/v1/prometheus/targets")
    assert refused.value.code == 401
    Fleet.objects.create(name="hidden").replicas.create(name="r0", base_url="http://10.0.0.1:8000")
    admin = APIClient()
    admin.force_login(tenant_a_admin)
    assert admin.get("/api/v1/prometheus/targets").json() == []
