"""The whole loop for real: simfleet replicas, a gateway, a Celery worker with beat, Postgres,
Redis, and traffic through the gateway. Rollouts are driven by the worker's own beat ticks."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis
from django.conf import settings

from evaluation.models import Verdict
from orchestration.gateway_snapshot import publish_snapshot
from registry.services import alias_move
from rollouts.models import Deployment, Rollout, Route
from tenants.services.accounts import tenant_create
from tenants.services.gateway_keys import api_key_create
from tests.conftest import ROOT
from tests.e2e.release import phases as phases  # the fixture, for every test here
from tests.factories import DeploymentFactory, FleetFactory, ReplicaFactory, RouteFactory
from tests.gateway.conftest import GatewayLauncher, GatewayProcess, wait_for_version
from tests.registry.factories import register
from tests.simfleet.harness import Fleet as SimFleet
from tests.simfleet.harness import FleetLauncher, model, stop

ROUTE = "chat"


class Worker:
    """`celery worker -B` against the test database, as its own process group (kill -9-able)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        db = settings.DATABASES["default"]
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "REDIS_URL": settings.REDIS_URL,
            "LOG_LEVEL": "WARNING",
        }
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "-B",
                 "-c", "2", "-s", str(self.log.with_suffix(".schedule"))],
                cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def kill9(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@dataclass
class Traffic:
    """Open-loop requests through the gateway at a fixed rate, each from its own user, or with no
    `user` field at all (`with_user=False`: each request opens a conversation of its own)."""

    url: str
    key: str
    rate: float = 40.0
    with_user: bool = True
    max_tokens: int = 8
    statuses: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    async def _run(self) -> None:
        rng = random.Random(11)  # noqa: S311 -- user names, not secrets
        pending: set[asyncio.Task[None]] = set()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            next_at = time.monotonic()
            while not self._stop.is_set():
                user = f"user-{rng.randrange(1_000_000)}"
                task = asyncio.create_task(self._one(session, user))
                pending.add(task)
                task.add_done_callback(pending.discard)
                next_at += 1 / self.rate
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if pending:
                await asyncio.wait(pending, timeout=20)

    async def _one(self, session: aiohttp.ClientSession, user: str) -> None:
        body: dict[str, Any] = {
            "model": ROUTE,
            "messages": [{"role": "user", "content": "Is my order on its way? " * 3}],
            "max_tokens": self.max_tokens,
        }
        if self.with_user:
            body["user"] = user
        else:
            body["messages"][0]["content"] += f" (order {user})"
        try:
            async with session.post(
                f"{self.url}/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {self.key}"},
            ) as response:
                await response.read()
                self.statuses.append(response.status)
        except aiohttp.ClientError:
            self.statuses.append(0)


@dataclass
class Stack:
    baseline: SimFleet
    candidate_fleet: SimFleet
    gateway: GatewayProcess
    worker: Worker
    route: Route
    candidate: Deployment
    key: str

    def traffic(self) -> Traffic:
        return Traffic(url=self.gateway.url, key=self.key)


FAST = {"step_base_ms": 2, "decode_per_seq_ms": 0.1, "prefill_per_token_ms": 0.05}


def build_stack(
    tmp_path: Path,
    fleets: FleetLauncher,
    gateways: GatewayLauncher,
    *,
    candidate_faults: dict[str, Any] | None = None,
    speed: dict[str, float] | None = None,
    baseline_replicas: int = 2,
    candidate_replicas: int = 1,
) -> Stack:
    profile = model(speed=speed or FAST, answer_tokens=8)
    baseline_fleet = fleets.start([profile], replicas=baseline_replicas)
    candidate_fleet = fleets.start(
        [profile], replicas=candidate_replicas, faults=candidate_faults, seed=5
    )
    v1, v2 = register(version="v1"), register(version="v2")
    alias_move(actor=None, family="support-chat", name="production", artifact=v1, reason="GA")
    deployments = []
    for name, sim, artifact in (("base", baseline_fleet, v1), ("cand", candidate_fleet, v2)):
        fleet = FleetFactory.create(name=name)
        for index, url in enumerate(sim.urls):
            ReplicaFactory.create(fleet=fleet, name=f"r{index}", base_url=url)
        deployments.append(
            DeploymentFactory.create(
                artifact=artifact, fleet=fleet, served_model_name="tiny", state="ready"
            )
        )
    route = RouteFactory.create(name=ROUTE, baseline=deployments[0])
    tenant = tenant_create(actor=None, slug="acme", name="Acme")
    _, key = api_key_create(actor=None, tenant=tenant, name="e2e")
    gateway = gateways.start(redis_url=settings.REDIS_URL)
    version = publish_snapshot()
    assert version is not None
    wait_for_version(gateway, version)
    worker = Worker(tmp_path / "worker.log")
    worker.start()
    return Stack(baseline_fleet, candidate_fleet, gateway, worker, route, deployments[1], key)


@pytest.fixture
def stacks(tmp_path: Path, redis_client: redis.Redis) -> Iterator[list[Stack]]:
    built: list[Stack] = []
    yield built
    for stack in built:
        stack.worker.stop()


@pytest.fixture
def launchers(tmp_path: Path) -> Iterator[tuple[FleetLauncher, GatewayLauncher]]:
    fleets = FleetLauncher(tmp_path)
    gateways = GatewayLauncher(tmp_path)
    yield fleets, gateways
    gateways.stop_all()
    fleets.stop_all()


def record_timing(name: str, seconds: float) -> None:
    """Appends a measured time for bench/rollback_times.py, when it runs these tests."""
    path = os.environ.get("TOLLGATE_TIMINGS")
    if path:
        with open(path, "a") as out:
            out.write(f'{{"name": "{name}", "seconds": {seconds:.3f}}}\n')


def wait_for_state(rollout_id: int, states: set[str], seconds: float) -> Rollout:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rollout = Rollout.objects.get(pk=rollout_id)
        if rollout.state in states:
            return rollout
        time.sleep(0.2)
    rollout = Rollout.objects.get(pk=rollout_id)
    # What the judge said last, so that a rollout that never settled says why.
    last = Verdict.objects.filter(rollout_id=rollout_id).order_by("-looked_at", "-id").first()
    said = f"; the judge's last look ({last.looked_at:%H:%M:%S}): {last.reason}" if last else ""
    raise AssertionError(
        f"rollout {rollout_id} still {rollout.state} at step {rollout.step_index}{said}"
    )


__all__ = ["Stack", "build_stack", "record_timing", "stop", "wait_for_state"]
