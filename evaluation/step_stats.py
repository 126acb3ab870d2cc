"""The guardrails' figures for each arm of a rollout's current step, from the stored request
samples: counts, error and timeout rates, p95 TTFT and TPOT."""

from __future__ import annotations

import datetime as dt

import numpy as np
import numpy.typing as npt
from django.db import connection

from evaluation.judge import ArmSamples
from rollouts.choices import LIVE_STATES
from rollouts.models import Rollout
from rollouts.plans import ArmStats

# SQL for the percentiles, which the ORM does not aggregate; the table is this app's own.
_STATS = """
SELECT count(*),
       count(*) FILTER (WHERE status >= 500 AND status <> 504 OR finish = 'error'),
       count(*) FILTER (WHERE status = 504),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY tpot_ms)
FROM evaluation_requestsample
WHERE rollout_id = %s AND arm = %s AND ts >= %s AND status <> 499 AND finish <> 'rejected'
"""


def arm_stats(rollout_id: int, arm: str, since: dt.datetime) -> ArmStats:
    """Client disconnects (499) and requests the gateway refused say nothing about the model and
    are left out."""
    with connection.cursor() as cursor:
        cursor.execute(_STATS, [str(rollout_id), arm, since])
        samples, errors, timeouts, ttft, tpot = cursor.fetchone()
    return ArmStats(samples, errors, timeouts, ttft, tpot)


def step_stats(rollout: Rollout) -> dict[str, ArmStats] | None:
    """The current step's samples per arm, while a step is running."""
    if rollout.step_started_at is None or rollout.state not in LIVE_STATES:
        return None
    return {
        arm: arm_stats(rollout.pk, arm, rollout.step_started_at) for arm in ("baseline", "canary")
    }


def arm_stats_of(samples: ArmSamples) -> ArmStats:
    """The same figures as `arm_stats`, from samples already in memory (what a tick reads)."""
    counted = (samples.status != 499) & (samples.finish != "rejected")
    errors = ((samples.status >= 500) & (samples.status != 504)) | (samples.finish == "error")
    return ArmStats(
        samples=int(counted.sum()),
        errors=int((counted & errors).sum()),
        timeouts=int((counted & (samples.status == 504)).sum()),
        ttft_p95_ms=_p95(samples.ttft_ms[counted]),
        tpot_p95_ms=_p95(samples.tpot_ms[counted]),
    )


def _p95(values: npt.NDArray[np.float64]) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, 95)) if len(finite) else None
