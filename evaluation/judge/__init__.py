"""The A/B judge's statistical core: plain Python on numpy and scipy, no Django.

    report = judge(baseline, candidate, policy, final=False, control=None)

Give it each arm's requests of the rollout's judged steps so far as `ArmSamples` columns; it
answers with a `Report`: a `MetricVerdict` per metric (pass / fail / inconclusive, n per arm, both
estimates, the difference and its interval, the fail and pass margins, the alpha, the rule that
fired) and one `Decision`. See `core` for the rules and the error guarantee, `sequential` for why
looking every tick is safe, `estimators` for the statistics, `guardrails` for the SLO limits, and
`bench/judge_calibration.py` for the measured error rates.
"""

from evaluation.judge.core import NO_DATA, TOO_FEW_SAMPLES, judge
from evaluation.judge.policy import (
    DEFAULT_METRICS,
    DEFAULT_POLICY,
    Direction,
    Kind,
    MetricPolicy,
    Policy,
    ScheduledLook,
)
from evaluation.judge.report import Decision, MetricVerdict, Outcome, Report
from evaluation.judge.samples import ArmSamples

__all__ = [
    "DEFAULT_METRICS",
    "DEFAULT_POLICY",
    "NO_DATA",
    "TOO_FEW_SAMPLES",
    "ArmSamples",
    "Decision",
    "Direction",
    "Kind",
    "MetricPolicy",
    "MetricVerdict",
    "Outcome",
    "Policy",
    "Report",
    "ScheduledLook",
    "judge",
]
