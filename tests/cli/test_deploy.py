"""`tollgate deploy` against a stand-in that answers as POST/GET /api/v1/deployments are
specified (the endpoint is being written); the request it sends and how --wait ends."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.cli.conftest import Reply, StandIn, run_cli

DEPLOY = [
    *("deploy", "--artifact", "support-chat:v2", "--fleet", "gpu-a"),
    *("--served-model-name", "chat-v2", "--max-model-len", "8192"),
]


def deployment(state: str, problems: list[str] | None = None) -> dict[str, Any]:
    return {
        "id": 42,
        "artifact": "support-chat:v2",
        "fleet": "gpu-a",
        "served_model_name": "chat-v2",
        "kind": "full",
        "max_model_len": 8192,
        "state": state,
        "problems": problems or [],
    }


def test_deploy_sends_the_deployment_and_prints_its_id(
    stand_in_factory: Callable[..., StandIn],
) -> None:
    stand_in = stand_in_factory(script=[Reply(201, deployment("pending"))])
    result = run_cli(DEPLOY, url=stand_in.url, token="t")
    assert result.exit_code == 0, result.output
    assert result.stdout == "42\n"
    (seen,) = stand_in.seen
    assert (seen.method, seen.path) == ("POST", "/api/v1/deployments")
    assert "Idempotency-Key" in seen.headers
    assert json.loads(seen.body) == {
        "artifact": "support-chat:v2",
        "fleet": "gpu-a",
        "served_model_name": "chat-v2",
        "kind": "full",
        "max_model_len": 8192,
    }


def test_deploy_waits_until_ready(stand_in_factory: Callable[..., StandIn]) -> None:
    script = [deployment("pending"), deployment("pending"), deployment("ready")]
    stand_in = stand_in_factory(
        script=[Reply(201 if i == 0 else 200, b) for i, b in enumerate(script)]
    )
    result = run_cli(
        ["--json", *DEPLOY, "--wait", "--interval", "0.1"], url=stand_in.url, token="t"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["state"] == "ready"
    assert [s.path for s in stand_in.seen[1:]] == ["/api/v1/deployments/42"] * 2


def test_a_failed_deployment_exits_1_with_its_problems(
    stand_in_factory: Callable[..., StandIn],
) -> None:
    failed = deployment("failed", ["r0: CUDA out of memory", "r1: no answer in 600 s"])
    stand_in = stand_in_factory(script=[Reply(201, deployment("pending")), Reply(200, failed)])
    result = run_cli([*DEPLOY, "--wait", "--interval", "0.1"], url=stand_in.url, token="t")
    assert result.exit_code == 1
    assert "failed - r0: CUDA out of memory; r1: no answer in 600 s" in result.stderr
