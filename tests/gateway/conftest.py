"""Real gateway processes in front of real simfleet replicas, configured through Redis."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
import redis
import redis.asyncio as aredis

from gateway.snapshot import (
    CHANGED_CHANNEL,
    SNAPSHOT_KEY,
    ApiKey,
    Arm,
    Budget,
    Deployment,
    Replica,
    Route,
    Snapshot,
    Tenant,
)
from tests.conftest import ROOT, free_port
from tests.simfleet.harness import Fleet, FleetLauncher, model, request, stop

ROUTE = "support-chat"
ACME_KEY = "tk_acme_0123456789abcdef"
GLOBEX_KEY = "tk_globex_0123456789abcdef"
QA_KEY = "tk_qa_0123456789abcdef"


def key_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def make_snapshot(
    baseline: list[str],
    canary: list[str] | None = None,
    *,
    canary_weight: float = 0.0,
    acme_budget: Budget | None = None,
    acme_fail_mode: str = "closed",
    globex_fail_mode: str = "open",
    stickiness: str = "user",
    served_model_name: str = "tiny",
) -> Snapshot:
    """Two tenants (acme, globex), a QA key that may force arms, one route with two arms."""
    deployments = {
        "base": Deployment(
            id="base",
            served_model_name=served_model_name,
            replicas=tuple(Replica(id=f"b{i}", base_url=url) for i, url in enumerate(baseline)),
        )
    }
    arms = [Arm(name="baseline", deployment_id="base", weight=100 - canary_weight)]
    if canary:
        deployments["cand"] = Deployment(
            id="cand",
            served_model_name=served_model_name,
            replicas=tuple(Replica(id=f"c{i}", base_url=url) for i, url in enumerate(canary)),
        )
        arms.append(Arm(name="canary", deployment_id="cand", weight=canary_weight))
    return Snapshot(
        version=time.time_ns() // 1000,
        generated_at=dt.datetime.now(dt.UTC),
        tenants={
            "acme": Tenant(
                id="acme",
                slug="acme",
                fail_mode=acme_fail_mode,  # type: ignore[arg-type]
                budget=acme_budget or Budget(),
            ),
            "globex": Tenant(id="globex", slug="globex", fail_mode=globex_fail_mode),  # type: ignore[arg-type]
        },
        keys={
            key_hash(ACME_KEY): ApiKey(id="k1", tenant_id="acme", prefix="tk_acme"),
            key_hash(GLOBEX_KEY): ApiKey(id="k2", tenant_id="globex", prefix="tk_globex"),
            key_hash(QA_KEY): ApiKey(id="k3", tenant_id="acme", prefix="tk_qa", can_force_arm=True),
        },
        routes={
            ROUTE: Route(
                name=ROUTE,
                arms=tuple(arms),
                salt="rollout-1",
                rollout_id="r1",
                stickiness=stickiness,  # type: ignore[arg-type]
            )
        },
        deployments=deployments,
    )


def publish(redis_url: str, snapshot: Snapshot) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set(SNAPSHOT_KEY, snapshot.model_dump_json())
    client.publish(CHANGED_CHANNEL, str(snapshot.version))
    client.close()


@dataclass(frozen=True)
class GatewayProcess:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    metrics_url: str  # the listener Prometheus scrapes (GATEWAY_METRICS_PORT)

    def version(self) -> int | None:
        try:
            reply = request("GET", f"{self.url}/readyz", timeout=1.0)
        except OSError:
            return None
        value = reply.json().get("snapshot_version")
        return int(value) if value is not None else None


class GatewayLauncher:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.started: list[GatewayProcess] = []

    def start(self, *, redis_url: str, workers: int = 1, **env: str) -> GatewayProcess:
        port = free_port()
        metrics_port = int(env.get("GATEWAY_METRICS_PORT") or free_port())
        log = self.home / f"gateway-{port}.log"
        environ = {
            **os.environ,
            "REDIS_URL": redis_url,
            "GATEWAY_PORT": str(port),
            "GATEWAY_METRICS_PORT": str(metrics_port),
            "GATEWAY_WORKERS": str(workers),
            "GATEWAY_SNAPSHOT_POLL_S": "0.5",
            **env,
        }
        environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "gateway"],
                cwd=ROOT,
                env=environ,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        gateway = GatewayProcess(
            f"http://127.0.0.1:{port}", process, log, f"http://127.0.0.1:{metrics_port}"
        )
        self.started.append(gateway)
        deadline = time.monotonic() + 15
        while True:
            try:
                if request("GET", f"{gateway.url}/healthz", timeout=1.0).status == 200:
                    return gateway
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the gateway did not come up:\n{log.read_text()}")
            time.sleep(0.05)

    def stop_all(self) -> None:
        for gateway in self.started:
            stop(gateway.process)


def serve(
    gateways: GatewayLauncher, redis_url: str, snapshot: Snapshot, **env: str
) -> GatewayProcess:
    """A gateway started with `env`, once it has applied `snapshot`."""
    gateway = gateways.start(redis_url=redis_url, workers=1, **env)
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    return gateway


def wait_for_version(gateway: GatewayProcess, version: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while gateway.version() != version:
        if time.monotonic() > deadline:
            raise AssertionError(f"gateway never applied snapshot {version}")
        time.sleep(0.05)


@pytest.fixture
def redis_url() -> Iterator[str]:
    url = os.environ["REDIS_URL"]  # the test database (tests/settings.py)
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture
async def client() -> AsyncIterator[aredis.Redis]:
    """An asyncio client of the test database, emptied around the test."""
    connection = aredis.Redis.from_url(os.environ["REDIS_URL"])
    await connection.flushdb()
    yield connection
    await connection.flushdb()
    await connection.aclose()


@pytest.fixture(scope="module")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetLauncher]:
    launcher = FleetLauncher(tmp_path_factory.mktemp("fleets"))
    yield launcher
    launcher.stop_all()


@pytest.fixture(scope="module")
def fleet(fleets: FleetLauncher) -> Fleet:
    """Two fast replicas for the baseline and one for the canary."""
    return fleets.start([model(answer_tokens=6)], replicas=3)


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[GatewayLauncher]:
    launcher = GatewayLauncher(tmp_path)
    yield launcher
    launcher.stop_all()


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def chat_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": ROUTE,
        "messages": [{"role": "user", "content": "How do canaries work?"}],
        "max_tokens": 6,
        **extra,
    }


def records(redis_url: str, count: int) -> list[dict[str, Any]]:
    """The request records on the samples stream, once `count` of them are there."""
    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 5
    while client.xlen("tollgate:samples") < count:
        assert time.monotonic() < deadline, "the gateway did not record every request"
        time.sleep(0.05)
    entries: list[tuple[bytes, dict[bytes, bytes]]] = cast(Any, client.xrange("tollgate:samples"))
    client.close()
    return [orjson.loads(fields[b"r"]) for _, fields in entries]
