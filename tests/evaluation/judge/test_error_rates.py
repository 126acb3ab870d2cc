"""A small, seeded version of bench/judge_calibration.py: looks on growing samples, as the engine
takes them, rarely roll back a healthy candidate and usually catch a bad one. (The bench measures
the rates on 500 rollouts; this only guards against a change that breaks them outright.)"""

from __future__ import annotations

import numpy as np

from evaluation.judge import Decision, judge
from tests.evaluation.judge.arms import make_arm

LOOKS = 12
SEQUENCES = 30


def rolled_back(rng: np.random.Generator, candidate_factor: float) -> bool:
    """One step of two minutes: 3,600 baseline and 1,200 candidate requests, judged at 12
    growing prefixes (the requests in order of arrival)."""
    baseline = make_arm(rng, 3600, name="baseline", per_s=30, tools=0.5)
    candidate = make_arm(
        rng, 1200, name="candidate", per_s=10, tools=0.5, ttft_factor=candidate_factor
    )
    for look in range(1, LOOKS + 1):
        report = judge(
            baseline.take(slice(0, look * len(baseline) // LOOKS)),
            candidate.take(slice(0, look * len(candidate) // LOOKS)),
            final=look == LOOKS,
        )
        if report.decision is Decision.ROLLBACK:
            return True
    return False


def test_healthy_candidates_are_rarely_rolled_back_under_repeated_looks() -> None:
    rng = np.random.default_rng(101)
    rollbacks = sum(rolled_back(rng, 1.0) for _ in range(SEQUENCES))
    assert rollbacks <= 1


def test_a_candidate_with_a_third_slower_first_token_is_caught() -> None:
    rng = np.random.default_rng(202)
    caught = sum(rolled_back(rng, 1.33) for _ in range(SEQUENCES))
    assert caught >= 27
