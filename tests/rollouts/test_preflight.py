"""Preflight against real (simulated) replicas: load the adapter, prove it answers, or fail."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.utils import timezone

from rollouts.choices import RolloutState
from rollouts.models import Deployment, Route
from rollouts.plans import Plan, Step
from rollouts.providers import teardown
from rollouts.services.rollouts import rollout_create, rollout_preflight, rollout_start
from tests.factories import DeploymentFactory, FleetFactory, ReplicaFactory, RouteFactory
from tests.registry.factories import register
from tests.simfleet.harness import Fleet as SimFleet
from tests.simfleet.harness import FleetLauncher, model, request

S = RolloutState
ADAPTER_PATH = "/models/support-chat/v2-lora"
PLAN = Plan(steps=(Step(weight=5), Step(weight=100)), progress_deadline_s=60)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimFleet]:
    launcher = FleetLauncher(tmp_path)
    yield launcher.start([model(adapters={ADAPTER_PATH: {}})], replicas=2)
    launcher.stop_all()


@pytest.fixture
def lora_route(sim: SimFleet, db: None) -> tuple[Route, Deployment]:
    fleet = FleetFactory.create(name="sim", provider="simfleet")
    for index, url in enumerate(sim.urls):
        ReplicaFactory.create(fleet=fleet, name=f"r{index}", base_url=url)
    baseline = DeploymentFactory.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="tiny", state="ready"
    )
    candidate = DeploymentFactory.create(
        artifact=register(version="v2", uri=ADAPTER_PATH, format="lora_adapter"),
        fleet=fleet,
        served_model_name="support-chat-v2",
        kind="lora",
    )
    return RouteFactory.create(name="chat", baseline=baseline), candidate


def test_a_lora_candidate_is_loaded_on_every_replica_then_the_rollout_runs(
    lora_route: tuple[Route, Deployment], sim: SimFleet, redis_client: redis.Redis
) -> None:
    route, candidate = lora_route
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    started = rollout_start(actor=None, rollout_id=rollout.pk)
    assert started.state == S.RUNNING
    for url in sim.urls:
        models = {m["id"]: m["parent"] for m in request("GET", f"{url}/v1/models").json()["data"]}
        assert models["support-chat-v2"] == "tiny"
    candidate.refresh_from_db()
    assert candidate.state == "ready"
    teardown(candidate)
    for url in sim.urls:
        ids = [m["id"] for m in request("GET", f"{url}/v1/models").json()["data"]]
        assert "support-chat-v2" not in ids


def test_a_candidate_that_never_answers_fails_the_rollout_at_the_deadline(
    lora_route: tuple[Route, Deployment], redis_client: redis.Redis
) -> None:
    route, candidate = lora_route
    # An adapter path no replica knows: loading fails with vLLM's 404, probes fail.
    candidate.artifact.uri = "/nowhere/adapter"
    candidate.artifact.save()
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    assert rollout_start(actor=None, rollout_id=rollout.pk).state == S.PREFLIGHT
    rollout_preflight(rollout_id=rollout.pk, now=timezone.now() + dt.timedelta(seconds=30))
    rollout.refresh_from_db()
    assert rollout.state == S.PREFLIGHT  # still within the deadline
    rollout_preflight(rollout_id=rollout.pk, now=timezone.now() + dt.timedelta(seconds=61))
    rollout.refresh_from_db()
    assert rollout.state == S.FAILED
    event = rollout.events.get(to_state=S.FAILED)
    assert "not ready after" in event.reason
    assert any("No adapter found" in p for p in event.evidence["problems"])
    route.refresh_from_db()
    assert route.canary is None


# A beat task: it writes in autocommit, so its publication runs at once, as in production.
@pytest.mark.django_db(transaction=True)
def test_the_probe_takes_an_out_of_memory_replica_out_of_the_gateways_rotation(
    lora_route: tuple[Route, Deployment], sim: SimFleet, redis_client: redis.Redis
) -> None:
    from gateway.snapshot import SNAPSHOT_KEY, Snapshot
    from rollouts.services.replicas import replicas_probe

    assert replicas_probe() == 0  # all healthy, nothing to publish
    assert request("POST", f"{sim.urls[1]}/admin/oom").status == 200
    assert replicas_probe() == 1
    snapshot = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or "")
    baseline = snapshot.deployments[str(lora_route[0].baseline_id)]
    assert [(r.id, r.healthy) for r in baseline.replicas] == [("sim/r0", True), ("sim/r1", False)]
