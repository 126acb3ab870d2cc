"""What a tick decides for a running rollout: hold, roll back, move on, or promote.

Fast guardrails run on every tick on the current step's candidate samples (error rate, timeout
rate, hard SLO breaches) and roll back the moment they are crossed, whatever the bake time. The
A/B judge (the evaluation app, through `relative_judgment`) compares the candidate with the
baseline on every tick too: interim looks while the step bakes may only roll back; once the step
has baked and holds enough samples, a final look passes it (next step or promotion), rolls back,
or pauses the rollout for a person when the evidence stays unresolved at the last judged step.
The 100% step has no baseline traffic to compare with and runs on the guardrails alone.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Literal

from django.utils import timezone

from evaluation.judging import Look, keep, step_look
from evaluation.step_stats import arm_stats
from rollouts.choices import RolloutState
from rollouts.models import Rollout
from rollouts.plans import ArmStats, SloGates
from rollouts.services.rollouts import rollout_preflight, rollout_transition

# "hold" keeps the step running; "pause" stops the rollout for a person.
Action = Literal["hold", "rollback", "advance", "promote", "pause"]
# How long past its bake time the last judged step may wait for the samples the judge needs
# before a person is asked instead: this, or twice the bake time if longer.
SAMPLE_PATIENCE_S = 300


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    evidence: dict[str, object]


def relative_judgment(
    rollout: Rollout, *, now: dt.datetime | None = None, final: bool = False
) -> Look | None:
    """The A/B judge's look at the current step (None at a step it does not compare)."""
    return step_look(rollout, now=now or timezone.now(), final=final)


def _keep(
    look: Look, rollout: Rollout, evidence: dict[str, object], *, acted: bool, record: bool
) -> None:
    """Stores the look (sparingly, unless acted on) and names it in the decision's evidence."""
    verdict = keep(look, rollout=rollout, acted=acted) if record else None
    evidence["judge"] = {
        "decision": str(look.decision),
        "final": look.final,
        "reason": look.report.reason,
        "verdict": verdict.pk if verdict is not None else None,
        "summary": str(look),
    }


def decide(rollout: Rollout, now: dt.datetime | None = None, *, record: bool = False) -> Decision:
    """What this tick would do. `record` stores the judge's look as a verdict (the tick does;
    a page that previews the decision does not)."""
    now = now or timezone.now()
    started = rollout.step_started_at or now  # set on entering RUNNING; never None there
    step = rollout.parsed_plan.steps[rollout.step_index]
    gates = rollout.parsed_gates
    canary = arm_stats(rollout.pk, "canary", started)
    baseline = arm_stats(rollout.pk, "baseline", started)
    control = arm_stats(rollout.pk, "control", started) if rollout.control_id else None
    baked_s = (now - started).total_seconds()
    evidence: dict[str, object] = {
        "step": rollout.step_index,
        "weight": step.weight,
        "baked_s": round(baked_s, 1),
        "canary": asdict(canary),
        "baseline": asdict(baseline),
    }
    if control is not None:
        evidence["control"] = asdict(control)
    if canary.samples >= gates.min_guardrail_samples:
        breach = _guardrail_breach(canary, gates)
        if breach:
            return Decision("rollback", breach, evidence)
    # At 100% the baseline gets no traffic: only the candidate's samples can count.
    baseline_needed = step.min_samples if step.weight < 100 else 0
    baking = baked_s < step.min_bake_s or canary.samples < step.min_samples
    # With a control arm the baseline's share shrinks (to nothing at 50%): the reference the
    # candidate is compared with is the baseline and its copy together.
    reference = baseline.samples + (control.samples if control is not None else 0)
    short_of_baseline = reference < baseline_needed
    look = relative_judgment(rollout, now=now, final=not (baking or short_of_baseline))
    if look is not None and look.decision == "rollback":
        _keep(look, rollout, evidence, acted=True, record=record)
        return Decision("rollback", f"the A/B judge: {look.report.reason}", evidence)
    if baking or short_of_baseline:
        if look is not None:
            _keep(look, rollout, evidence, acted=False, record=record)
        return Decision("hold", "baking" if baking else "waiting for baseline samples", evidence)
    last = rollout.step_index + 1 >= len(rollout.parsed_plan.steps)
    passed = (
        f"step {rollout.step_index + 1} at {step.weight:g}% held {canary.samples} candidate "
        f"samples over {baked_s:.0f} s within the guardrails and SLO gates"
    )
    if look is None:
        return Decision("promote" if last else "advance", passed, evidence)
    if look.decision in ("promote", "continue"):
        _keep(look, rollout, evidence, acted=True, record=record)
        return Decision(
            "promote" if last else "advance",
            f"{passed}; the A/B judge: {look.report.reason}",
            evidence,
        )
    # The judge holds for a person. Metrics short of samples settle with time, so they are
    # waited for a while first. A person who resumed the rollout at this step asked for more
    # evidence, not for the same question again: the step runs until the judge settles it.
    short = look.waiting_for_samples()
    patient = baked_s - step.min_bake_s < max(SAMPLE_PATIENCE_S, 2 * step.min_bake_s)
    resumed = rollout.events.filter(
        step_index=rollout.step_index, from_state=RolloutState.PAUSED, to_state=RolloutState.RUNNING
    ).exists()
    if (short and patient) or resumed:
        _keep(look, rollout, evidence, acted=False, record=record)
        why = f"samples for {', '.join(short)}" if short else "a settled verdict (resumed)"
        return Decision("hold", f"the A/B judge waits for {why}", evidence)
    _keep(look, rollout, evidence, acted=True, record=record)
    return Decision("pause", f"the A/B judge asks a person: {look.report.reason}", evidence)


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
    "pause": RolloutState.PAUSED,
}


def advance(rollout_id: int) -> Decision | None:
    """One tick for one rollout. Safe to run twice: the transition is a compare-and-set on the
    step the decision was taken on."""
    rollout = Rollout.objects.filter(pk=rollout_id).first()
    if rollout is not None and rollout.state == RolloutState.PREFLIGHT:
        rollout_preflight(rollout_id=rollout_id)
        return None
    if rollout is None or rollout.state != RolloutState.RUNNING:
        return None
    decision = decide(rollout, record=True)
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
