"""The SLO guardrails as tests with a known false-alarm rate, checked on every tick.

A guardrail says a share of the candidate's requests must stay under a limit: errors under
`max_error_rate`, timeouts under `max_timeout_rate`, and for a latency gate ("TTFT p95 under
800 ms") the share of requests slower than the gate under 5%. Reading the raw share against the
limit on every tick rolls back healthy candidates whenever a handful of early requests happen to
fail together (20 samples with one error is 5%). Instead each guardrail is a sequential test of
"the true share is at most the limit": a mixture of likelihood ratios against every share above
the limit, which for a candidate within the limit stays below 1 / alpha at every look with
chance at least 1 - alpha (Ville's inequality). A candidate far beyond a limit crosses within a
few requests: ten errors in ten requests against a 5% limit is a likelihood ratio of millions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.special import betaincc, betaln


@dataclass(frozen=True)
class GuardrailTest:
    name: str  # e.g. "error rate"
    events: int
    trials: int
    limit: float
    log_evidence: float  # log of the mixture likelihood ratio against "share <= limit"
    threshold: float  # log(1 / alpha)

    @property
    def breached(self) -> bool:
        return self.log_evidence >= self.threshold

    @property
    def share(self) -> float:
        return self.events / self.trials if self.trials else 0.0

    def describe(self) -> str:
        evidence = math.exp(min(self.log_evidence, 700.0))
        return (
            f"{self.name} {self.share:.1%} ({self.events} of {self.trials}) is above its "
            f"{self.limit:.1%} limit beyond doubt (evidence {evidence:.3g} against a "
            f"threshold of {math.exp(self.threshold):.3g})"
        )


def share_above_limit(
    name: str, *, events: int, trials: int, limit: float, alpha: float
) -> GuardrailTest:
    """The test of "at most `limit` of the requests" after `events` in `trials`."""
    if not 0 <= limit <= 1:
        raise ValueError("limit must be in [0, 1]")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    if not 0 <= events <= trials:
        raise ValueError("events must be between 0 and trials")
    threshold = -math.log(alpha)
    if trials == 0 or limit == 1:
        return GuardrailTest(name, events, trials, limit, 0.0, threshold)
    if limit == 0:
        # "None at all": a single event disproves it.
        return GuardrailTest(name, events, trials, limit, math.inf if events else 0.0, threshold)
    # The mixture over the shares above the limit: a Beta(a, b) prior truncated to (limit, 1),
    # with b set so that its untruncated mean is twice the limit (the alternatives that matter
    # are near it).
    a = 1.0
    b = max((1 - 2 * limit) / (2 * limit), 1.0)
    # log of: integral over p in (limit, 1) of p^k (1-p)^(n-k) Beta(a, b)(p) dp / mass above limit,
    # divided by limit^k (1-limit)^(n-k).
    log_numerator = (
        float(betaln(events + a, trials - events + b))
        - float(betaln(a, b))
        + _log(float(betaincc(events + a, trials - events + b, limit)))
        - _log(float(betaincc(a, b, limit)))
    )
    log_null = events * math.log(limit) + (trials - events) * math.log1p(-limit)
    log_evidence = log_numerator - log_null
    if events <= limit * trials:
        # Every alternative above the limit explains a share at or under it worse than the limit
        # does, so the mixture is below 1; the tail integral may have underflowed on the way.
        log_evidence = min(log_evidence, 0.0)
    return GuardrailTest(name, events, trials, limit, log_evidence, threshold)


def _log(tail: float) -> float:
    """Floored, so that an upper tail too small for a float reads as very unlikely, not -inf."""
    return math.log(max(tail, 1e-300))
