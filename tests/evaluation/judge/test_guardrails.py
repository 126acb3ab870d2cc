"""The SLO guardrails as sequential tests: a handful of early failures is no breach, a clear
excess is one within a few requests, and a candidate at its limit rarely trips them however often
they are read."""

from __future__ import annotations

import itertools
import math
from functools import cache

import numpy as np
import pytest

from evaluation.judge.guardrails import GuardrailTest, share_above_limit

# The engine's alpha for one guardrail: 0.2 of the rollout's 0.01, over two steps and four tests.
ALPHA = 0.01 * 0.2 / 2 / 4


def error_rate(events: int, trials: int, *, limit: float = 0.05) -> GuardrailTest:
    return share_above_limit("error rate", events=events, trials=trials, limit=limit, alpha=ALPHA)


def test_one_error_in_20_requests_against_a_5_percent_limit_is_no_breach() -> None:
    one = error_rate(1, 20)
    assert one.share == 0.05  # at the limit, read raw: the old rule's coin toss
    assert not one.breached
    assert not error_rate(4, 20).breached  # 20%, on 20 requests: not yet beyond doubt


def test_15_errors_in_20_requests_against_a_5_percent_limit_is_a_breach() -> None:
    breach = error_rate(15, 20)
    assert breach.breached
    assert breach.log_evidence > breach.threshold == pytest.approx(-math.log(ALPHA))
    assert breach.describe().startswith(
        "error rate 75.0% (15 of 20) is above its 5.0% limit beyond doubt (evidence "
    )
    assert breach.describe().endswith(f"against a threshold of {1 / ALPHA:.3g})")


def test_evidence_grows_with_every_error_and_fades_with_requests_that_succeed() -> None:
    evidence = [error_rate(events, 20).log_evidence for events in range(21)]
    assert all(later > earlier for earlier, later in itertools.pairwise(evidence))
    first_breach = next(e for e in range(21) if error_rate(e, 20).breached)
    assert 4 < first_breach < 15
    # The same errors among more requests that succeeded are a smaller share: less evidence.
    assert error_rate(8, 200).log_evidence < error_rate(8, 20).log_evidence
    assert not error_rate(8, 200).breached


def test_a_share_below_the_limit_gathers_evidence_against_a_breach() -> None:
    # 1% errors against a 5% limit: the more requests, the less the evidence of a breach.
    assert error_rate(20, 2000).log_evidence < error_rate(4, 400).log_evidence < 0
    assert error_rate(0, 0).log_evidence == 0.0
    assert not error_rate(0, 0).breached


def test_a_limit_of_none_at_all_breaks_at_the_first_event_and_one_of_all_never() -> None:
    assert error_rate(1, 1000, limit=0.0).breached
    assert not error_rate(0, 1000, limit=0.0).breached
    assert not error_rate(1000, 1000, limit=1.0).breached


def test_a_stricter_alpha_needs_more_evidence() -> None:
    loose = share_above_limit("error rate", events=7, trials=20, limit=0.05, alpha=0.01)
    strict = share_above_limit("error rate", events=7, trials=20, limit=0.05, alpha=1e-6)
    assert loose.log_evidence == strict.log_evidence
    assert loose.breached
    assert not strict.breached


def test_a_candidate_at_its_limit_rarely_trips_the_guardrail_at_any_look() -> None:
    alpha, limit, looks, paths = 0.05, 0.05, 500, 400

    @cache
    def breached(events: int, trials: int) -> bool:
        return share_above_limit(
            "error rate", events=events, trials=trials, limit=limit, alpha=alpha
        ).breached

    rng = np.random.default_rng(12)
    errors = np.cumsum(rng.random((paths, looks)) < limit, axis=1)
    tripped = [
        any(breached(int(events), n + 1) for n, events in enumerate(path)) for path in errors
    ]
    assert float(np.mean(tripped)) <= alpha
    # What the test protects against: the raw share read at every look from 20 requests on
    # (the old guardrail) is over the limit at some look on nearly every path.
    raw = errors[:, 19:] / np.arange(20, looks + 1) > limit
    assert float(raw.any(axis=1).mean()) > 0.8


def test_it_refuses_limits_alphas_and_counts_that_make_no_sense() -> None:
    with pytest.raises(ValueError, match=r"limit must be in \[0, 1\]"):
        share_above_limit("x", events=0, trials=1, limit=1.5, alpha=0.01)
    with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\)"):
        share_above_limit("x", events=0, trials=1, limit=0.05, alpha=1.0)
    with pytest.raises(ValueError, match="events must be between 0 and trials"):
        share_above_limit("x", events=3, trials=2, limit=0.05, alpha=0.01)
