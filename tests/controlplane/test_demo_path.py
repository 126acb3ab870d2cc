"""The demo's main path: seeded data, published to a real gateway, answered by simfleet."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from django.core.management import call_command
from pytest_django.fixtures import Settings

from rollouts.seed import FLEETS, REPLICAS_PER_FLEET
from tests.conftest import ROOT, free_port
from tests.gateway.conftest import GatewayLauncher, wait_for_version
from tests.simfleet.harness import healthy, stop, wait_until


@pytest.fixture
def demo_fleet(settings: Settings, tmp_path: Path) -> Iterator[int]:
    replicas = len(FLEETS) * REPLICAS_PER_FLEET  # what `make up` starts for the seeded fleets
    base = free_ports_in_a_row(replicas)
    settings.SIMFLEET_BASE_PORT = base
    command = [sys.executable, "-m", "simfleet", "--replicas", str(replicas)]
    command += ["--base-port", str(base)]
    with (tmp_path / "simfleet.log").open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: all(healthy(f"http://127.0.0.1:{base + i}") for i in range(replicas)), 30
        )
        yield base
    finally:
        stop(process)


def free_ports_in_a_row(count: int) -> int:
    """A port that is free with the `count - 1` after it (the demo's replicas take a base port
    and the ones above it): a free port's neighbour may well be taken."""
    for _ in range(100):
        base = free_port()
        sockets = [socket.socket() for _ in range(count)]
        try:
            for offset, sock in enumerate(sockets):
                sock.bind(("127.0.0.1", base + offset))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return base
    raise AssertionError(f"no {count} free ports in a row")


@pytest.mark.django_db(transaction=True)
def test_the_seeded_demo_answers_through_the_gateway(
    demo_fleet: int, tmp_path: Path, redis_client: object
) -> None:
    launcher = GatewayLauncher(tmp_path)
    try:
        gateway = launcher.start(redis_url=os.environ["REDIS_URL"])
        out = io.StringIO()
        call_command("seed_demo", "--json", stdout=out)
        demo = json.loads(out.getvalue())
        published = json.loads(redis_client.get("tollgate:gateway:snapshot"))  # type: ignore[attr-defined]
        wait_for_version(gateway, published["version"])

        with openai.OpenAI(
            base_url=f"{gateway.url}/v1", api_key=demo["tenant_api_keys"]["acme"], max_retries=0
        ) as client:
            assert [m.id for m in client.models.list()] == demo["routes"]
            answer = client.chat.completions.create(
                model=demo["routes"][0],
                messages=[{"role": "user", "content": "Where is my order?"}],
                max_tokens=8,
            )
        assert answer.choices[0].message.content
        assert answer.usage is not None
        assert answer.usage.completion_tokens > 0
    finally:
        launcher.stop_all()
