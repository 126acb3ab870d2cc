"""--wait: a plain line per change in a CI log, one redrawn line on a terminal, and a timeout."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cli.rollouts import rollout_reading
from cli.wait import MAX_FAILED_POLLS, wait_until_settled
from tests.cli.conftest import Drop, Reply, StandIn, run_cli

PLAN = {"steps": [{"weight": 10}, {"weight": 50}, {"weight": 100}]}


def rollout(state: str, step: int, weight: float, reason: str) -> dict[str, Any]:
    """A rollout as GET /api/v1/rollouts/{id} answers it (the fields the CLI reads)."""
    return {
        "id": 7,
        "route": "chat",
        "baseline": "support-chat:v1",
        "candidate": "support-chat:v2",
        "control": None,
        "state": state,
        "step_index": step,
        "canary_weight": weight,
        "plan": PLAN,
        "events": [{"to_state": state, "reason": reason}],
    }


JOURNEY = [
    rollout("running", 0, 10, "preflight passed"),
    rollout("running", 0, 10, "preflight passed"),  # nothing changed: no line
    rollout("running", 1, 50, "judge: no worse at 10% (p=0.62)"),
    rollout("running", 1, 50, "judge: no worse at 10% (p=0.62)"),
    rollout("promoted", 2, 100, "judge: no worse at 50% (p=0.48)"),
]


def test_a_ci_log_gets_one_line_per_change(
    stand_in_factory: Callable[..., StandIn],
) -> None:
    stand_in = stand_in_factory(script=[Reply(200, body) for body in JOURNEY])
    result = run_cli(
        ["rollout", "status", "7", "--wait", "--interval", "0.1"], url=stand_in.url, token="t"
    )
    assert result.exit_code == 0, result.output
    assert len(stand_in.seen) == 5
    lines = [line.split("] ", 1)[1] for line in result.stderr.splitlines() if line[:1] == "["]
    assert lines == [
        "rollout 7 running: step 1/3, canary 10% - preflight passed",
        "rollout 7 running: step 2/3, canary 50% - judge: no worse at 10% (p=0.62)",
        "rollout 7 promoted: step 3/3, canary 100% - judge: no worse at 50% (p=0.48)",
    ]
    assert "\r" not in result.output


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_redrawn_line() -> None:
    readings: Iterator[dict[str, Any]] = iter(JOURNEY)
    screen = Terminal()
    final, code = wait_until_settled(
        lambda: next(readings),
        rollout_reading,
        what="rollout 7",
        interval=0.01,
        timeout=10,
        stream=screen,
    )
    assert (final["state"], code) == ("promoted", 0)
    text = screen.getvalue()
    # Each poll redraws the line in place; only the end moves on to a new line.
    assert text.count("\r\x1b[2K") == len(JOURNEY)
    assert text.count("\n") == 1
    assert text.endswith("\n")
    last = text.rsplit("\r\x1b[2K", 1)[1]
    assert last.startswith("[" + "#" * 20 + "]")
    assert "step 3/3, canary 100%" in last
    first = text.split("\r\x1b[2K")[1]
    assert first.startswith("[" + "#" * 7 + "-" * 13 + "]")


def test_a_poll_the_server_fails_is_asked_again_and_the_wait_goes_on(
    stand_in_factory: Callable[..., StandIn],
) -> None:
    # A 500 (no retry within the request) and dropped connections between readings: the wait
    # notes each and reports the outcome it then sees.
    failing = Reply(500, {"detail": "boom"})
    script = [
        Reply(200, JOURNEY[0]),
        failing,
        Drop(),
        Drop(),
        Drop(),
        Reply(200, JOURNEY[4]),
    ]
    stand_in = stand_in_factory(script=script)
    args = ["rollout", "status", "7", "--wait", "--interval", "0.1"]
    result = run_cli(args, url=stand_in.url, token="t", TOLLGATE_RETRIES="0")
    assert result.exit_code == 0, result.output
    assert len(stand_in.seen) == len(script)
    assert (
        "polling rollout 7 failed (1 of 5 in a row), still waiting: GET /api/v1/rollouts/7 "
        "answered 500" in result.stderr
    )
    assert "(4 of 5 in a row)" in result.stderr
    assert "rollout 7 promoted" in result.stderr


def test_polls_that_keep_failing_end_the_wait_with_the_last_error(
    stand_in_factory: Callable[..., StandIn],
) -> None:
    stand_in = stand_in_factory(script=[Reply(200, JOURNEY[0])] + [Reply(500, {"detail": "x"})] * 9)
    args = ["rollout", "status", "7", "--wait", "--interval", "0.1"]
    result = run_cli(args, url=stand_in.url, token="t", TOLLGATE_RETRIES="0")
    assert result.exit_code == 2
    assert len(stand_in.seen) == 1 + MAX_FAILED_POLLS
    assert "(4 of 5 in a row)" in result.stderr
    assert "Error: GET /api/v1/rollouts/7 answered 500" in result.stderr


def test_a_4xx_poll_ends_the_wait_at_once(stand_in_factory: Callable[..., StandIn]) -> None:
    revoked = Reply(401, {"detail": "Invalid or revoked API token."})
    stand_in = stand_in_factory(script=[Reply(200, JOURNEY[0]), revoked, Reply(200, JOURNEY[4])])
    args = ["rollout", "status", "7", "--wait", "--interval", "0.1"]
    result = run_cli(args, url=stand_in.url, token="t", TOLLGATE_RETRIES="0")
    assert result.exit_code == 2, result.output
    assert len(stand_in.seen) == 2
    assert "still waiting" not in result.stderr


def test_waiting_past_the_timeout_exits_2_and_says_the_rollout_goes_on(
    stand_in_factory: Callable[..., StandIn],
) -> None:
    stand_in = stand_in_factory(script=[Reply(200, JOURNEY[0])] * 50)
    args = ["rollout", "status", "7", "--wait", "--interval", "0.1", "--timeout", "0.3"]
    result = run_cli(args, url=stand_in.url, token="t")
    assert result.exit_code == 2
    assert "gave up waiting after 0.3 s: rollout 7 running" in result.stderr
    assert "rollout 7 goes on without this wait" in result.stderr


@pytest.mark.parametrize(
    ("state", "code"),
    [("rolled_back", 1), ("aborted", 1), ("failed", 1), ("paused", 3), ("promoted", 0)],
)
def test_settled_states_and_their_exit_codes(state: str, code: int) -> None:
    assert rollout_reading(rollout(state, 1, 0, "why")).exit_code == code


@pytest.mark.parametrize("state", ["pending", "preflight", "running"])
def test_live_states_keep_the_wait_going(state: str) -> None:
    assert rollout_reading(rollout(state, 0, 0, "")).exit_code is None


def test_start_and_wait_stops_at_a_pause_with_exit_3(
    stand_in_factory: Callable[..., StandIn],
) -> None:
    held = rollout("paused", 1, 50, "judge: too close to call at 50%")
    script = [Reply(201, JOURNEY[0]), Reply(200, JOURNEY[0]), Reply(200, held)]
    stand_in = stand_in_factory(script=script)
    args = ["rollout", "start", "--route", "chat", "--candidate", "3", "--wait"]
    args += ["--interval", "0.1"]
    result = run_cli(args, url=stand_in.url, token="t")
    assert result.exit_code == 3, result.output
    assert result.stdout == "7\n"
    assert [(s.method, s.path) for s in stand_in.seen] == [
        ("POST", "/api/v1/rollouts"),
        ("GET", "/api/v1/rollouts/7"),
        ("GET", "/api/v1/rollouts/7"),
    ]
    assert "rollout 7 is paused, held for a person: judge: too close to call at 50%" in (
        result.stderr
    )
    assert "tollgate rollout resume|promote|rollback 7 --reason" in result.stderr
