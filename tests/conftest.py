"""The fixed cast of actors and the real services that tests run against."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.utils import timezone
from pytest_django.fixtures import Settings as SettingsWrapper
from pytest_django.live_server_helper import LiveServer
from rest_framework.test import APIClient

from core.redis import get_redis
from evaluation.models import RequestSample
from rollouts.models import Deployment, Rollout, Route
from rollouts.plans import Plan, SloGates, Step
from rollouts.services.rollouts import rollout_create, rollout_start
from tenants.choices import Role, Scope
from tenants.models import Tenant, User
from tenants.services.accounts import api_token_create
from tests import checkout_guard
from tests.factories import (
    DeploymentFactory,
    FleetFactory,
    ReplicaFactory,
    RequestSampleFactory,
    RouteFactory,
    TenantFactory,
    UserFactory,
)
from tests.registry.factories import register

ROOT = Path(__file__).resolve().parent.parent
checkout_guard.install(ROOT)


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    """tests/vllm runs against a real vLLM server in an environment of its own: `make test-vllm`
    builds it and names it in TOLLGATE_VLLM_PYTHON; without it the suite is not collected."""
    if collection_path == ROOT / "tests" / "vllm" and not os.environ.get("TOLLGATE_VLLM_PYTHON"):
        return True
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check: Callable[[], bool], seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"condition not met within {seconds} s")


# --- the cast -------------------------------------------------------------------------------------


@pytest.fixture
def tenant_a(db: None) -> Tenant:
    return TenantFactory.create(slug="tenant-a", name="Tenant A")


@pytest.fixture
def tenant_b(db: None) -> Tenant:
    return TenantFactory.create(slug="tenant-b", name="Tenant B")


@pytest.fixture
def release_manager(db: None) -> User:
    return UserFactory.create(username="release-manager", role=Role.RELEASE_MANAGER)


@pytest.fixture
def tenant_a_admin(tenant_a: Tenant) -> User:
    return UserFactory.create(username="tenant-a-admin", role=Role.TENANT_ADMIN, tenant=tenant_a)


@pytest.fixture
def tenant_b_admin(tenant_b: Tenant) -> User:
    return UserFactory.create(username="tenant-b-admin", role=Role.TENANT_ADMIN, tenant=tenant_b)


@pytest.fixture
def viewer(db: None) -> User:
    return UserFactory.create(username="viewer", role=Role.VIEWER)


@pytest.fixture
def ci_user(db: None) -> User:
    return UserFactory.create(username="ci-pipeline", role=Role.RELEASE_MANAGER)


@pytest.fixture
def ci_token(ci_user: User) -> str:
    """The secret of a CI pipeline's token with the registry and rollout scopes."""
    scopes = [Scope.REGISTRY_READ, Scope.REGISTRY_WRITE, Scope.ROLLOUTS_READ, Scope.ROLLOUTS_WRITE]
    _, secret = api_token_create(actor=None, user=ci_user, name="ci", scopes=scopes)
    return secret


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


# --- a running rollout and its samples ---------------------------------------------------------


@pytest.fixture
def route(db: None) -> Route:
    """A route with a baseline deployment on a one-replica fleet (a directory may override it)."""
    fleet = FleetFactory.create(name="fleet")
    ReplicaFactory.create(fleet=fleet, name="r0", base_url="http://127.0.0.1:9101")
    v1 = register(version="v1")
    baseline = DeploymentFactory.create(artifact=v1, fleet=fleet, served_model_name="chat-v1")
    return RouteFactory.create(name="chat", baseline=baseline)


@pytest.fixture
def candidate(route: Route) -> Deployment:
    """A ready candidate for `route`, on the baseline's fleet."""
    return DeploymentFactory.create(
        artifact=register(version="v2"),
        fleet=route.baseline.fleet,
        served_model_name="chat-v2",
        state="ready",
    )


@pytest.fixture
def plan() -> Plan:
    """The plan `running` starts on; a module whose tests need another overrides this fixture."""
    return Plan(
        steps=(
            Step(weight=10, min_bake_s=30, min_samples=50),
            Step(weight=100, min_bake_s=30, min_samples=50),
        )
    )


@pytest.fixture
def gates() -> SloGates | None:
    """The SLO gates `running` starts with (None: the service's); the limits that the rollouts
    tests' reasons and pages name. Overridable like `plan`."""
    return SloGates(ttft_p95_ms=300, tpot_p95_ms=40, max_error_rate=0.05, min_guardrail_samples=20)


@pytest.fixture
def running(
    route: Route,
    candidate: Deployment,
    plan: Plan,
    gates: SloGates | None,
    redis_client: redis.Redis,
) -> Rollout:
    """The candidate's rollout on the route, started."""
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=plan, gates=gates)
    return rollout_start(actor=None, rollout_id=rollout.pk)


def stored(rollout: Rollout | None, arm: str, count: int, **fields: Any) -> list[RequestSample]:
    """`count` samples of one arm as the consumer stores them (one batch, one timestamp), in the
    rollout's current step unless `step` is given."""
    fields.setdefault("ts", timezone.now())
    return RequestSample.objects.bulk_create(
        RequestSampleFactory.build_batch(count, rollout=rollout, arm=arm, **fields)
    )


# --- real services --------------------------------------------------------------------------------


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """The test Redis database (15 unless REDIS_URL names another), emptied around each test."""
    client = get_redis()
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A Redis server of the test's own, on a free port, that the test may stop."""
    port = free_port()
    process = subprocess.Popen(
        [
            *("redis-server", "--port", str(port), "--bind", "127.0.0.1"),
            *("--save", "", "--appendonly", "no", "--dir", str(tmp_path)),
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, socket_connect_timeout=0.2)
    wait_for(lambda: _pings(client))
    yield f"redis://127.0.0.1:{port}/0", process
    process.kill()
    process.wait()


class RedisServer:
    """A Redis server of a test's own that can be restarted on its port, without persistence:
    it comes back empty, as a Redis without RDB or AOF does after a crash or a reboot."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                *("redis-server", "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", str(self.home)),
            ],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        wait_for(lambda: _pings(client))
        client.close()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self, *, down_s: float = 0.0) -> None:
        self.kill()
        time.sleep(down_s)
        self.start()


@pytest.fixture
def restartable_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.kill()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture(scope="session")
def prometheus_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[list[str]], str]]:
    """Starts real Prometheus servers scraping the given targets every second; returns the URL."""
    started: list[subprocess.Popen[bytes]] = []

    def start(targets: list[str]) -> str:
        home = tmp_path_factory.mktemp("prometheus")
        config = home / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: tollgate-web\n    static_configs: [{{targets: {targets!r}}}]\n"
        )
        port = free_port()
        with (home / "prometheus.log").open("wb") as log:
            process = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={home / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _http_ok(f"{url}/-/ready"), seconds=30)
        return url

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=15)


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 -- local URL
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture
def prometheus_sd(tmp_path: Path, live_server: LiveServer) -> Iterator[str]:
    """A real Prometheus that learns what to scrape from the control plane (`http_sd_configs` on
    /api/v1/prometheus/targets, with a viewer's read-only token), every second; its URL."""
    token_file = tmp_path / "token"
    call_command("prometheus_sd_token", str(token_file), stdout=StringIO())
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: fleet\n"
        "    http_sd_configs:\n"
        f"      - url: {live_server.url}/api/v1/prometheus/targets\n"
        "        refresh_interval: 1s\n"
        f"        authorization: {{type: Bearer, credentials_file: {token_file}}}\n"
    )
    port = free_port()
    with (tmp_path / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _http_ok(f"{url}/-/ready"), seconds=30)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=15)


@pytest.fixture(scope="session")
def prometheus_url(prometheus_factory: Callable[[list[str]], str]) -> str:
    """A real Prometheus with nothing to scrape, for readiness checks."""
    return prometheus_factory([])


@pytest.fixture
def use_redis_url(settings: SettingsWrapper) -> Iterator[Callable[[str], None]]:
    """Points the control plane at another Redis for the rest of the test."""

    def use(url: str) -> None:
        settings.REDIS_URL = url
        get_redis.cache_clear()

    yield use
    get_redis.cache_clear()
