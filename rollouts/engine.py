"""What a tick decides for a running rollout: hold, roll back, move on, or promote.

Fast guardrails run on every tick on the current step's candidate samples (error rate, timeout
rate, hard SLO breaches) and roll back the moment they are crossed, whatever the bake time. When
the step has baked long enough and holds enough samples, the step is decided. The relative A/B
judgment of candidate against baseline plugs in at `relative_judgment` (the evaluation app);
until it exists, a step is passed on the guardrails and SLO gates alone, and every event says so.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Literal

from django.db import connection
from django.utils import timezone

from rollouts import providers
from rollouts.choices import DeploymentState, RolloutState
from rollouts.models import Deployment, Rollout
from rollouts.plans import SloGates
from rollouts.services import rollout_transition

Action = Literal["hold", "rollback", "advance", "promote"]


@dataclass(frozen=True)
class ArmStats:
    samples: int
    errors: int
    timeouts: int
    ttft_p95_ms: float | None
    tpot_p95_ms: float | None

    @property
    def error_rate(self) -> float:
        return self.errors / self.samples if self.samples else 0.0

    @property
    def timeout_rate(self) -> float:
        return self.timeouts / self.samples if self.samples else 0.0


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    evidence: dict[str, object]


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


def relative_judgment(rollout: Rollout) -> str | None:
    """The seam for the A/B judge (evaluation issue): None means no relative judgment was made."""
    return None


def decide(rollout: Rollout, now: dt.datetime | None = None) -> Decision:
    now = now or timezone.now()
    started = rollout.step_started_at or now  # set on entering RUNNING; never None there
    step = rollout.parsed_plan.steps[rollout.step_index]
    gates = rollout.parsed_gates
    canary = arm_stats(rollout.pk, "canary", started)
    baseline = arm_stats(rollout.pk, "baseline", started)
    baked_s = (now - started).total_seconds()
    evidence: dict[str, object] = {
        "step": rollout.step_index,
        "weight": step.weight,
        "baked_s": round(baked_s, 1),
        "canary": asdict(canary),
        "baseline": asdict(baseline),
    }
    if canary.samples >= gates.min_guardrail_samples:
        breach = _guardrail_breach(canary, gates)
        if breach:
            return Decision("rollback", breach, evidence)
    # At 100% the baseline gets no traffic: only the candidate's samples can count.
    baseline_needed = step.min_samples if step.weight < 100 else 0
    if baked_s < step.min_bake_s or canary.samples < step.min_samples:
        return Decision("hold", "baking", evidence)
    if baseline.samples < baseline_needed:
        return Decision("hold", "waiting for baseline samples", evidence)
    judgment = relative_judgment(rollout)
    evidence["relative_judgment"] = judgment
    last = rollout.step_index + 1 >= len(rollout.parsed_plan.steps)
    reason = (
        f"step {rollout.step_index + 1} at {step.weight:g}% held {canary.samples} candidate "
        f"samples over {baked_s:.0f} s within the guardrails and SLO gates "
        "(no relative A/B judgment yet)"
    )
    return Decision("promote" if last else "advance", reason, evidence)


def _guardrail_breach(stats: ArmStats, gates: SloGates) -> str | None:
    if stats.error_rate > gates.max_error_rate:
        return f"error rate {stats.error_rate:.1%} > {gates.max_error_rate:.1%}"
    if stats.timeout_rate > gates.max_timeout_rate:
        return f"timeout rate {stats.timeout_rate:.1%} > {gates.max_timeout_rate:.1%}"
    if gates.ttft_p95_ms and stats.ttft_p95_ms and stats.ttft_p95_ms > gates.ttft_p95_ms:
        return f"TTFT p95 {stats.ttft_p95_ms:.0f} ms > {gates.ttft_p95_ms:g} ms"
    if gates.tpot_p95_ms and stats.tpot_p95_ms and stats.tpot_p95_ms > gates.tpot_p95_ms:
        return f"TPOT p95 {stats.tpot_p95_ms:.1f} ms > {gates.tpot_p95_ms:g} ms"
    return None


TO_STATE: dict[Action, RolloutState] = {
    "rollback": RolloutState.ROLLED_BACK,
    "advance": RolloutState.RUNNING,
    "promote": RolloutState.PROMOTED,
}


def preflight(rollout_id: int, now: dt.datetime | None = None) -> None:
    """Gets the candidate ready (loading adapters) and starts the first step once every replica
    answers a real inference for it; fails the rollout past the plan's progress deadline."""
    rollout = (
        Rollout.objects.select_related("candidate__fleet", "candidate__artifact")
        .filter(pk=rollout_id)
        .first()
    )
    if rollout is None or rollout.state != RolloutState.PREFLIGHT:
        return
    candidate = rollout.candidate
    if candidate.state != DeploymentState.READY:
        problems = providers.prepare(candidate)
        ready, not_ready = providers.is_ready(candidate)
        if not ready:
            began = (
                rollout.events.filter(to_state=RolloutState.PREFLIGHT)
                .values_list("created_at", flat=True)
                .last()
            )
            waited = ((now or timezone.now()) - (began or rollout.created_at)).total_seconds()
            if waited > rollout.parsed_plan.progress_deadline_s:
                rollout_transition(
                    rollout_id=rollout.pk,
                    to=RolloutState.FAILED,
                    actor=None,
                    reason=f"the candidate was not ready after {waited:.0f} s",
                    evidence={"problems": problems + not_ready},
                )
            return
        Deployment.objects.filter(pk=candidate.pk).update(state=DeploymentState.READY)
    rollout_transition(
        rollout_id=rollout.pk,
        to=RolloutState.RUNNING,
        actor=None,
        reason="preflight passed: every replica answers the candidate",
    )


def advance(rollout_id: int) -> Decision | None:
    """One tick for one rollout. Safe to run twice: the transition is a compare-and-set on the
    step the decision was taken on."""
    rollout = Rollout.objects.filter(pk=rollout_id).first()
    if rollout is not None and rollout.state == RolloutState.PREFLIGHT:
        preflight(rollout_id)
        return None
    if rollout is None or rollout.state != RolloutState.RUNNING:
        return None
    decision = decide(rollout)
    if decision.action != "hold":
        rollout_transition(
            rollout_id=rollout.pk,
            to=TO_STATE[decision.action],
            actor=None,
            reason=decision.reason,
            evidence=decision.evidence,
            expected_step=rollout.step_index,
        )
    return decision
