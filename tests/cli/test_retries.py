"""Every write carries an Idempotency-Key, and a retry resends the same request with the same key:
against a stand-in server that fails on cue."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from tests.cli.conftest import Drop, Reply, StandIn, run_cli

ARTIFACT = {"family": "support-chat", "version": "v1", "digest": "sha256:" + "ab" * 32}
REGISTER = [
    *("artifact", "register", "support-chat:v1", "--uri", "s3://models/support-chat/v1"),
    *("--digest", "sha256:" + "ab" * 32),
]


def keys(stand_in: StandIn) -> list[str]:
    return [seen.headers.get("Idempotency-Key", "") for seen in stand_in.seen]


def test_a_write_is_retried_with_the_same_key_and_body(
    stand_in_factory: Callable[..., StandIn], fast_retries: None
) -> None:
    stand_in = stand_in_factory(
        script=[Reply(503, {"detail": "restarting"}), Drop(), Reply(201, ARTIFACT)]
    )
    result = run_cli(REGISTER, url=stand_in.url, token="tg_ci")
    assert result.exit_code == 0, result.output
    assert result.stdout == "support-chat:v1\n"
    assert len(stand_in.seen) == 3
    assert len(set(keys(stand_in))) == 1
    assert uuid.UUID(keys(stand_in)[0]).version == 4
    assert len({seen.body for seen in stand_in.seen}) == 1
    body: dict[str, Any] = json.loads(stand_in.seen[0].body)
    assert body == {
        "family": "support-chat",
        "version": "v1",
        "uri": "s3://models/support-chat/v1",
        "digest": "sha256:" + "ab" * 32,
        "format": "safetensors",
    }
    assert stand_in.seen[0].headers["Authorization"] == "Bearer tg_ci"
    assert stand_in.seen[0].headers["Content-Type"] == "application/json"
    assert "503 Service Unavailable; retrying" in result.stderr
    assert "(attempt 3 of 4)" in result.stderr


def test_each_run_makes_a_new_key(
    stand_in_factory: Callable[..., StandIn], fast_retries: None
) -> None:
    stand_in = stand_in_factory(script=[Reply(201, ARTIFACT), Reply(200, ARTIFACT)])
    assert run_cli(REGISTER, url=stand_in.url, token="tg_ci").exit_code == 0
    assert run_cli(REGISTER, url=stand_in.url, token="tg_ci").exit_code == 0
    first, second = keys(stand_in)
    assert first
    assert second
    assert first != second


def test_reads_carry_no_key_and_are_retried_too(
    stand_in_factory: Callable[..., StandIn], fast_retries: None
) -> None:
    rollout = {"id": 7, "route": "chat", "state": "running", "plan": {"steps": [{}, {}]}}
    stand_in = stand_in_factory(script=[Reply(502, None), Reply(200, rollout)])
    result = run_cli(["rollout", "status", "7"], url=stand_in.url, token="tg_ci")
    assert result.exit_code == 0, result.output
    assert [seen.method for seen in stand_in.seen] == ["GET", "GET"]
    assert keys(stand_in) == ["", ""]


def test_retries_give_up_with_the_servers_answer(
    stand_in_factory: Callable[..., StandIn], fast_retries: None
) -> None:
    stand_in = stand_in_factory(script=[Reply(503, {"detail": "down for maintenance"})] * 3)
    result = run_cli(["--retries", "2", *REGISTER], url=stand_in.url, token="tg_ci")
    assert result.exit_code == 2
    assert len(stand_in.seen) == 3
    assert "answered 503 Service Unavailable: down for maintenance" in result.stderr


def test_a_client_error_is_not_retried(
    stand_in_factory: Callable[..., StandIn], fast_retries: None
) -> None:
    errors = {"format": ['"exe" is not a valid choice.'], "digest": ["This field is required."]}
    stand_in = stand_in_factory(script=[Reply(400, errors)])
    result = run_cli(REGISTER, url=stand_in.url, token="tg_ci")
    assert result.exit_code == 2
    assert len(stand_in.seen) == 1
    assert (
        'answered 400 Bad Request: format: "exe" is not a valid choice.; '
        "digest: This field is required." in result.stderr
    )
