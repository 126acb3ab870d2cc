"""Replicas: one unlike its siblings is set aside; one that serves both arms cancels out."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from evaluation.judge import ArmSamples, Decision, Outcome, Report, judge
from evaluation.judge.replicas import odd_replica
from tests.evaluation.judge.arms import make_arm


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(31)


def slowed(arm: ArmSamples, replica: str, factor: float) -> ArmSamples:
    """The arm with one replica's latencies `factor` times as long (a slow host)."""
    on = arm.replica == replica
    return replace(
        arm,
        ttft_ms=np.where(on, arm.ttft_ms * factor, arm.ttft_ms),
        tpot_ms=np.where(on, arm.tpot_ms * factor, arm.tpot_ms),
    )


def test_a_slow_replica_of_the_candidate_is_set_aside_and_named(
    rng: np.random.Generator,
) -> None:
    baseline = make_arm(rng, 12_000, name="b")
    candidate = slowed(make_arm(rng, 12_000, name="c"), "c-2", 1.25)
    report = judge(baseline, candidate, final=True, last_step=True)
    assert len(report.set_aside) == 1
    assert report.set_aside[0].startswith("candidate replica c-2: median T")  # TTFT or TPOT
    assert "+25%" in report.set_aside[0]
    assert "against its 3 siblings" in report.set_aside[0]
    # Judged on its three healthy replicas, the candidate is the baseline's equal.
    assert report.verdict("ttft_p50").outcome is Outcome.PASS
    assert report.verdict("ttft_p50").n_candidate < 10_000
    assert report.decision is Decision.PROMOTE
    again = Report.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.set_aside == report.set_aside


def test_without_the_screen_the_slow_replica_leaves_the_median_unsettled(
    rng: np.random.Generator,
) -> None:
    # What setting it aside avoids: the candidate's replicas disagree, so the replica-level
    # variance keeps the median from being shown within its margin.
    baseline = make_arm(rng, 12_000, name="b")
    candidate = slowed(make_arm(rng, 12_000, name="c"), "c-2", 1.25)
    renamed = replace(candidate, replica=np.char.replace(candidate.replica, "c-", "x"))
    assert odd_replica(renamed, "candidate") is not None  # (the names do not matter)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("evaluation.judge.core.odd_replica", lambda arm, name: None)
        report = judge(baseline, candidate, final=True, last_step=True)
    assert report.verdict("ttft_p50").outcome is Outcome.INCONCLUSIVE
    assert report.decision is Decision.HOLD


def test_a_regression_on_every_replica_is_not_set_aside(rng: np.random.Generator) -> None:
    baseline = make_arm(rng, 12_000, name="b")
    candidate = make_arm(rng, 12_000, name="c", ttft_factor=1.3)
    report = judge(baseline, candidate, final=False)
    assert report.set_aside == ()
    assert report.decision is Decision.ROLLBACK


def test_chance_differences_between_healthy_replicas_set_none_aside() -> None:
    rng = np.random.default_rng(5)
    found = [odd_replica(make_arm(rng, 4000, drift=0.1), "baseline") for _ in range(30)]
    assert found == [None] * 30


def test_where_every_replica_differs_the_furthest_is_not_set_aside(
    rng: np.random.Generator,
) -> None:
    # Replicas that drift apart, each its own way: the slowest is 30% above its siblings'
    # median, but they themselves span 20%. Setting it aside would leave three replicas that
    # agree more than replicas do, and the judge would read that as precision.
    arm = make_arm(rng, 12_000, name="c")
    for replica, factor in (("c-0", 0.9), ("c-2", 1.08), ("c-3", 1.3)):
        arm = slowed(arm, replica, factor)
    assert odd_replica(arm, "candidate") is None
    # The same slow replica beside siblings that agree is a host's problem.
    assert odd_replica(slowed(make_arm(rng, 12_000, name="c"), "c-3", 1.3), "candidate")


def test_too_few_replicas_or_requests_to_tell_set_none_aside(rng: np.random.Generator) -> None:
    three = slowed(make_arm(rng, 12_000, name="c", replicas=3), "c-0", 1.5)
    assert odd_replica(three, "candidate") is None  # two siblings cannot outvote it
    few = slowed(make_arm(rng, 300, name="c"), "c-0", 1.5)
    assert odd_replica(few, "candidate") is None


def test_a_slow_replica_serving_both_arms_cancels_in_their_difference(
    rng: np.random.Generator,
) -> None:
    # Two adapters on the same four servers: one server is slow for both, which says nothing
    # about either adapter. (Each arm alone would read that server as an outlier.)
    def on_shared_servers(arm: ArmSamples) -> ArmSamples:
        shared = np.char.add("server-", np.char.rpartition(arm.replica, "-")[:, 2])
        return slowed(replace(arm, replica=shared), "server-0", 1.6)

    baseline = on_shared_servers(make_arm(rng, 12_000, name="v1"))
    candidate = on_shared_servers(make_arm(rng, 12_000, name="v2"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("evaluation.judge.core.odd_replica", lambda arm, name: None)
        report = judge(baseline, candidate, final=True, last_step=True)
    assert report.verdict("ttft_p50").outcome is Outcome.PASS
    assert report.decision is Decision.PROMOTE
