"""`tollgate rollout ...` against a real control plane: start, watch, steer."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis

from rollouts.choices import RolloutState
from rollouts.models import Deployment, Rollout, Route
from rollouts.services.rollouts import rollout_transition
from tests.cli.conftest import Drop, Forward, Invoke, StandIn, run_cli


def test_starts_a_rollout_and_prints_its_id(
    tollgate: Invoke, route: Route, candidate: Deployment, redis_client: redis.Redis
) -> None:
    result = tollgate(
        *("rollout", "start", "--route", "chat", "--candidate", str(candidate.pk)),
        *("--step", "10:60:50", "--step", "100"),
    )
    assert result.exit_code == 0, result.output
    rollout = Rollout.objects.get()
    assert result.stdout == f"{rollout.pk}\n"
    assert (rollout.state, rollout.candidate_id) == (RolloutState.RUNNING, candidate.pk)
    assert [step["weight"] for step in rollout.plan["steps"]] == [10, 100]
    assert rollout.plan["steps"][0]["min_bake_s"] == 60
    assert "step 1 of 2, canary 10%" in result.stderr


def test_a_start_whose_answer_was_lost_starts_one_rollout(
    server: str,
    ci_token: str,
    route: Route,
    candidate: Deployment,
    redis_client: redis.Redis,
    stand_in_factory: Callable[..., StandIn],
    fast_retries: None,
) -> None:
    # Without the key the retry would be a second rollout on the route (a 409): the pipeline
    # would fail although its rollout started.
    proxy = stand_in_factory(upstream=server, script=[Drop(forward=True), Forward()])
    args = ["--json", "rollout", "start", "--route", "chat", "--candidate", str(candidate.pk)]
    result = run_cli(args, url=proxy.url, token=ci_token)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == Rollout.objects.get().pk
    assert proxy.seen[0].headers["Idempotency-Key"] == proxy.seen[1].headers["Idempotency-Key"]


@pytest.mark.parametrize(
    ("state", "reason", "exit_code"),
    [
        (RolloutState.PROMOTED, "judge: the candidate is no worse (p=0.41)", 0),
        (RolloutState.ROLLED_BACK, "guardrail: ttft p95 412 ms > 300 ms", 1),
        (RolloutState.PAUSED, "judge: too close to call, a person decides", 3),
    ],
)
def test_waiting_on_a_settled_rollout_exits_with_its_outcome(
    tollgate: Invoke, running: Rollout, state: RolloutState, reason: str, exit_code: int
) -> None:
    rollout_transition(rollout_id=running.pk, to=state, actor=None, reason=reason)
    result = tollgate("rollout", "status", str(running.pk), "--wait", "--interval", "0.1")
    assert result.exit_code == exit_code, result.output
    # One plain line for the CI log (no terminal here: no redraw), and the reason.
    progress = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 1
    assert f"rollout {running.pk} {state}" in progress[0]
    assert reason in progress[0]
    assert "\r" not in result.stderr
    assert f"rollout {running.pk} on route chat: {state}" in result.stdout
    if state == RolloutState.PAUSED:
        assert "held for a person" in result.stderr


def test_status_without_waiting_shows_the_step_and_weight(
    tollgate: Invoke, running: Rollout
) -> None:
    result = tollgate("rollout", "status", str(running.pk))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"rollout {running.pk} on route chat: running",
        "  candidate support-chat:v2, baseline support-chat:v1",
        "  step 1 of 2, canary 10%",
        "  latest: preflight passed: every replica answers the candidate",
    ]


def test_json_output_is_the_apis_object(tollgate: Invoke, running: Rollout) -> None:
    result = tollgate("--json", "rollout", "status", str(running.pk))
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert (body["id"], body["state"], body["canary_weight"]) == (running.pk, "running", 10.0)
    assert [e["to_state"] for e in body["events"]] == ["preflight", "running"]


def test_pauses_a_rollout_with_a_reason(tollgate: Invoke, running: Rollout) -> None:
    result = tollgate("rollout", "pause", str(running.pk), "--reason", "latency complaints")
    assert result.exit_code == 0, result.output
    assert f"rollout {running.pk} on route chat: paused" in result.stdout
    running.refresh_from_db()
    assert running.state == RolloutState.PAUSED
    last = running.events.last()
    assert last is not None
    assert last.reason == "pause: latency complaints"

    again = tollgate("rollout", "resume", str(running.pk))
    assert again.exit_code == 2  # --reason is required
    assert "--reason" in again.stderr


def test_an_action_the_rollout_cannot_take_is_a_clear_error(
    tollgate: Invoke, running: Rollout
) -> None:
    result = tollgate("rollout", "resume", str(running.pk), "--reason", "go on")
    assert result.exit_code == 2
    assert f"rollout {running.pk} is running, not paused" in result.stderr
