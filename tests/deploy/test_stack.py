"""`make up` / `make down` (deploy/stack.py) for real: a second stack on free ports.

The stack under test starts its own Redis and Prometheus (nothing answers on its ports) and uses
the machine's Postgres with a database of its own, so a developer's stack is left alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import ROOT, free_port, wait_for

DATABASE = "tollgate_stack_test"
# What `up` starts in a stack of its own (Postgres is the machine's and stays up).
STARTED = ("redis", "prometheus", "simfleet", "gateway", "web", "worker", "beat")


def stack(env: dict[str, str], command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "deploy/stack.py", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 -- local URL
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def pid_of(var: Path, name: str) -> int:
    return int(json.loads((var / "run" / f"{name}.json").read_text())["pid"])


def alive(pid: int) -> bool:
    try:
        return " Z " not in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False


def drop_database() -> None:
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


@pytest.fixture
def stack_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    web_port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        "TOLLGATE_VAR_DIR": str(tmp_path / "var"),
        "WEB_PORT": str(web_port),
        "PUBLIC_WEB_URL": f"http://127.0.0.1:{web_port}",
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "PROMETHEUS_URL": f"http://127.0.0.1:{free_port()}",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DATABASE}",
        "SECRET_KEY": "stack-test-secret-key-0123456789-0123456789",
        "WEB_WORKERS": "1",
        "SIMFLEET_BASE_PORT": str(free_port()),
        "GATEWAY_PORT": str(free_port()),
        "GATEWAY_METRICS_PORT": str(free_port()),
        "SIMFLEET_REPLICAS": "1",
    }
    drop_database()
    yield env
    stack(env, "down")
    drop_database()


@pytest.mark.timeout(300)
def test_up_starts_what_is_missing_and_down_stops_exactly_that(
    stack_env: dict[str, str],
) -> None:
    var = Path(stack_env["TOLLGATE_VAR_DIR"])
    web = stack_env["PUBLIC_WEB_URL"]

    started = stack(stack_env, "up")
    assert started.returncode == 0, started.stdout + started.stderr
    for name in STARTED:
        assert f"{name}: started" in started.stdout
    assert "postgres: already running" in started.stdout
    assert (var / "log" / "web.log").exists()

    status, body = get(f"{web}/readyz")
    assert status == 200, body
    # Prometheus learns the replicas from the control plane (HTTP service discovery): the
    # simulated fleet, once the demo seed has registered it, is scraped with its fleet's label.
    seeded = subprocess.run(
        [sys.executable, "manage.py", "seed_demo"],
        cwd=ROOT,
        env=stack_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    query = urllib.parse.quote('count(vllm:num_requests_running{fleet="simfleet-a"})')
    prometheus = stack_env["PROMETHEUS_URL"]
    wait_for(
        lambda: get(f"{prometheus}/api/v1/query?query={query}")[1]["data"]["result"] != [],
        seconds=30,
    )
    # ...and the gateway on its metrics listener (its tenant port answers /metrics with a 404).
    gateway_up = urllib.parse.quote('up{job="tollgate-gateway"} == 1')
    wait_for(
        lambda: get(f"{prometheus}/api/v1/query?query={gateway_up}")[1]["data"]["result"] != [],
        seconds=30,
    )
    pids = {name: pid_of(var, name) for name in STARTED}

    again = stack(stack_env, "up")
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already running") == len(STARTED) + 1  # and Postgres
    assert {name: pid_of(var, name) for name in pids} == pids

    # Stopping Redis: /readyz names it with a 503 and the web process keeps serving.
    os.kill(pids["redis"], signal.SIGTERM)
    wait_for(lambda: not alive(pids["redis"]))
    status, body = get(f"{web}/readyz")
    assert status == 503
    assert body["checks"]["redis"]["status"] == "error"
    assert body["checks"]["database"]["status"] == "ok"
    assert get(f"{web}/healthz") == (200, {"status": "ok"})

    stopped = stack(stack_env, "down")
    assert stopped.returncode == 0
    assert "stopped beat, worker, web, gateway, simfleet, prometheus" in stopped.stdout
    for name in STARTED[1:]:
        wait_for(lambda name=name: not alive(pids[name]))  # type: ignore[misc]
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres") as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,), "down must not stop Postgres"


def test_up_says_what_is_missing_instead_of_a_traceback(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    result = stack({**stack_env, "PATH": str(empty_bin)}, "up")
    assert result.returncode == 1
    assert "Redis is not running on port" in result.stderr
    assert "apt-get install redis-server" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("command", "package"),
    [("test-packages", "prometheus"), ("test-packages", "chromium"), ("venv-packages", "npm")],
)
def test_a_missing_package_that_cannot_be_installed_is_named_in_one_line(
    stack_env: dict[str, str], tmp_path: Path, command: str, package: str
) -> None:
    # A PATH with none of the packages and no apt-get: what a user without root meets.
    only_bin = tmp_path / "bin"
    only_bin.mkdir()
    for present in {"prometheus", "chromium"} - {package}:
        (only_bin / present).symlink_to("/bin/true")
    result = stack({**stack_env, "PATH": str(only_bin)}, command)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"sudo apt-get install {package}" in lines[0]


def test_down_with_nothing_started_says_so(stack_env: dict[str, str]) -> None:
    result = stack(stack_env, "down")
    assert result.returncode == 0
    assert "nothing that 'up' started is running" in result.stdout
