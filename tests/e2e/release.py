"""What the end-to-end tests that drive Tollgate from outside share: wall time by phase, shown as
the test goes, and a release manager's token on the REST API and the `tollgate` CLI."""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from django.core.management import call_command

from orchestration.gateway_snapshot import publish_snapshot
from tenants.choices import Role
from tenants.services.accounts import user_create
from tests.docs.workflow import VENV_BIN
from tests.gateway.conftest import GatewayProcess

TOLLGATE = VENV_BIN / "tollgate"


@dataclass
class Phases:
    """Wall time of each phase, shown as the test goes (not captured)."""

    capsys: pytest.CaptureFixture[str]
    started: float = field(default_factory=time.monotonic)
    times: list[tuple[str, float]] = field(default_factory=list)

    def say(self, line: str) -> None:
        with self.capsys.disabled():
            sys.stdout.write(f"\n[phase {time.monotonic() - self.started:6.1f} s] {line}")
            sys.stdout.flush()

    def phase(self, name: str) -> _Phase:
        return _Phase(self, name)

    def summary(self) -> str:
        width = max([len(name) for name, _ in self.times] + [5])
        lines = [f"{name:<{width}} {seconds:6.1f} s" for name, seconds in self.times]
        total = time.monotonic() - self.started
        return "\n".join([*lines, f"{'total':<{width}} {total:6.1f} s"])


@dataclass
class _Phase:
    phases: Phases
    name: str
    began: float = 0.0

    def __enter__(self) -> None:
        self.began = time.monotonic()
        self.phases.say(f"{self.name} ...")

    def __exit__(self, *exc: object) -> None:
        took = time.monotonic() - self.began
        self.phases.times.append((self.name, took))
        self.phases.say(f"{self.name}: {took:.1f} s{' (failed)' if exc[0] else ''}")


@pytest.fixture
def phases(capsys: pytest.CaptureFixture[str]) -> Iterator[Phases]:
    timed = Phases(capsys)
    yield timed
    timed.say("phases:\n" + timed.summary() + "\n")


@dataclass
class ReleaseManager:
    """The release manager's token on the REST API and on the CLI."""

    url: str
    token: str
    home: Path

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = requests.post(
            f"{self.url}/api/v1{path}",
            json=body,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        assert response.status_code == 201, (path, response.status_code, response.text)
        answer: dict[str, Any] = response.json()
        return answer

    def run(self, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`tollgate COMMAND` as its own process, as a pipeline's step runs it."""
        return subprocess.run(
            [str(TOLLGATE), *shlex.split(command)],
            env={
                "PATH": os.environ.get("PATH", ""),
                "HOME": str(self.home),
                "TOLLGATE_URL": self.url,
                "TOLLGATE_TOKEN": self.token,
            },
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def tollgate(self, command: str, timeout: float = 120) -> str:
        """`tollgate COMMAND`'s stdout, once it exited 0."""
        result = self.run(command, timeout)
        assert result.returncode == 0, (command, result.returncode, result.stderr)
        return result.stdout.strip()

    def fleet(self, name: str, urls: list[str]) -> None:
        self.post("/fleets", {"name": name, "provider": "simfleet"})
        for index, url in enumerate(urls):
            self.post(f"/fleets/{name}/replicas", {"name": f"r{index}", "base_url": url})


def pipeline_token() -> str:
    """A release manager for the pipeline and its token, as docs/ci.md makes them."""
    user_create(actor=None, username="ci-bot", role=Role.RELEASE_MANAGER)
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "create_api_token", "ci-bot", "--scope", "all", "--expires", "90d", stdout=out, stderr=err
    )
    token = out.getvalue().strip()
    assert token.startswith("tg_"), out.getvalue()
    assert "\n" not in token, "the command prints the token alone"
    return token


def wait_for_snapshot(gateway: GatewayProcess, seconds: float = 15.0) -> None:
    """Until the gateway serves a snapshot at least as new as one published now."""
    version = publish_snapshot()
    deadline = time.monotonic() + seconds
    while version is None:  # a newer one won: publish again to learn a version
        version = publish_snapshot()
    while (gateway.version() or 0) < version:
        assert time.monotonic() < deadline, f"the gateway never applied snapshot {version}"
        time.sleep(0.1)


def wait_until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.2)
