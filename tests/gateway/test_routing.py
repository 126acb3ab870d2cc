"""Arm assignment and replica choice."""

from __future__ import annotations

import math
import random

from gateway.routing import (
    PREFIX_AFFINITY_MIN_CHARS,
    ReplicaLoad,
    choose_arm,
    choose_replica,
)
from gateway.snapshot import Arm, Deployment, Replica, Route


def route(canary_weight: float, salt: str = "rollout-1") -> Route:
    return Route(
        name="chat",
        salt=salt,
        arms=(
            Arm(name="baseline", deployment_id="b", weight=100 - canary_weight),
            Arm(name="canary", deployment_id="c", weight=canary_weight),
        ),
    )


def canary_sessions(weight: float, sessions: list[str], salt: str = "rollout-1") -> set[str]:
    chosen = route(weight, salt)
    return {s for s in sessions if choose_arm(chosen, s).name == "canary"}


SESSIONS = [f"user-{i}" for i in range(10_000)]


def test_arm_shares_match_the_weights_within_sampling_error() -> None:
    for weight in (5, 25, 50):
        share = len(canary_sessions(weight, SESSIONS)) / len(SESSIONS)
        p = weight / 100
        # Four standard errors: a correct hash fails this about once in 15,000 runs.
        assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / len(SESSIONS)), (weight, share)


def test_sessions_on_the_canary_stay_there_as_the_weight_grows() -> None:
    previous: set[str] = set()
    for weight in (5, 25, 50, 100):
        current = canary_sessions(weight, SESSIONS)
        assert previous <= current
        previous = current
    assert len(previous) == len(SESSIONS)


def test_a_control_arm_gets_the_canarys_share_and_the_canary_keeps_its_sessions() -> None:
    previous: set[str] = set()
    for weight, control in ((5, 5), (25, 25), (50, 50)):
        with_control = Route(
            name="chat",
            salt="rollout-1",
            arms=(
                Arm(name="baseline", deployment_id="b", weight=100 - weight - control),
                Arm(name="canary", deployment_id="c", weight=weight),
                Arm(name="control", deployment_id="b2", weight=control),
            ),
        )
        arms = [choose_arm(with_control, s).name for s in SESSIONS]
        for name, expected in (("canary", weight), ("control", control)):
            share, p = arms.count(name) / len(SESSIONS), expected / 100
            assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / len(SESSIONS)), (name, share)
        canary = {s for s, arm in zip(SESSIONS, arms, strict=True) if arm == "canary"}
        assert previous <= canary  # the canary's sessions stay on it as it grows
        assert canary == canary_sessions(weight, SESSIONS)  # the same cohort as without control
        previous = canary
    assert "baseline" not in arms  # at 50% the control takes the baseline's whole share


def test_a_new_rollout_draws_a_new_cohort() -> None:
    first = canary_sessions(25, SESSIONS, salt="rollout-1")
    second = canary_sessions(25, SESSIONS, salt="rollout-2")
    overlap = len(first & second) / len(first)
    assert 0.15 < overlap < 0.35  # independent draws overlap by about the weight


def test_the_same_session_always_gets_the_same_arm() -> None:
    chosen = route(50)
    for session in random.Random(3).sample(SESSIONS, 100):  # noqa: S311 -- picks test data
        assert len({choose_arm(chosen, session).name for _ in range(5)}) == 1


def deployment(*healthy: bool) -> Deployment:
    return Deployment(
        id="d",
        served_model_name="m",
        replicas=tuple(
            Replica(id=f"r{i}", base_url=f"http://r{i}", healthy=h) for i, h in enumerate(healthy)
        ),
    )


def test_unhealthy_replicas_are_never_chosen() -> None:
    load = ReplicaLoad()
    picks = {choose_replica(deployment(False, True, False), load, prefix=None) for _ in range(20)}
    assert {p.id for p in picks if p} == {"r1"}
    assert choose_replica(deployment(False, False), load, prefix=None) is None


def test_the_least_loaded_replica_is_chosen() -> None:
    load = ReplicaLoad()
    load.add("r0", 5000)
    load.add("r2", 100)
    chosen = choose_replica(deployment(True, True, True), load, prefix=None)
    assert chosen is not None
    assert chosen.id == "r1"


def test_a_long_system_prompt_sticks_to_one_replica_until_it_is_overloaded() -> None:
    load = ReplicaLoad()
    dep = deployment(True, True, True)
    prompt = "You are a support agent. " * (PREFIX_AFFINITY_MIN_CHARS // 10)
    home = choose_replica(dep, load, prefix=prompt)
    assert home is not None
    for _ in range(5):
        again = choose_replica(dep, load, prefix=prompt)
        assert again is not None
        assert again.id == home.id
        load.add(home.id, 500)  # moderately busier: affinity still wins
    load.add(home.id, 100_000)  # now far busier than the others
    moved = choose_replica(dep, load, prefix=prompt)
    assert moved is not None
    assert moved.id != home.id


def test_retries_exclude_the_replica_that_failed() -> None:
    load = ReplicaLoad()
    chosen = choose_replica(deployment(True, True), load, prefix=None, exclude=frozenset({"r0"}))
    assert chosen is not None
    assert chosen.id == "r1"
