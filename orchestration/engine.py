"""What a tick decides for a running rollout: hold, roll back, move on, or promote.

One error budget covers every path that can roll a candidate back (`Policy.alpha`, per rollout):
the SLO guardrails run on every tick on the current step's candidate samples as sequential tests
of "within the limit" (`evaluation.judge.guardrails`) at their share of it; the A/B judge
compares the candidate with the baseline on every tick too, at the rest of it: interim looks
while the step bakes may only roll back, on anytime-valid bounds; once the step has baked and
holds enough samples, a final look passes it (next step or promotion), rolls back, or pauses the
rollout for a person when the evidence stays unresolved at the last judged step. A step's first
final look is its scheduled look, where fail bounds may also read the alpha kept for one fixed
look per judged step (`Policy.fail_alphas`); later final looks of a held or resumed step read
the anytime-valid bounds alone. The 100% step has no baseline traffic to compare with and runs
on the guardrails alone.

`decide_on` is the decision itself, on samples in memory: the Celery tick (`advance`) calls it
on the stored samples, and `bench/judge_calibration.py` on simulated ones, so the error rates
the bench measures are the engine's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np
from django.utils import timezone

from evaluation import judging
from evaluation.judge import DEFAULT_POLICY, ArmSamples, Policy, Report
from evaluation.judge import Decision as JudgeDecision
from evaluation.judge.guardrails import GuardrailTest, share_above_limit
from evaluation.step_stats import arm_stats_of
from rollouts.choices import RolloutState
from rollouts.models import Rollout
from rollouts.plans import ArmStats, Plan, SloGates
from rollouts.services.rollouts import rollout_preflight, rollout_transition

# "hold" keeps the step running; "pause" stops the rollout for a person.
Action = Literal["hold", "rollback", "advance", "promote", "pause"]
# How long past its bake time the last judged step may wait for the samples the judge needs
# before a person is asked instead: this, or four times the bake time if longer (on latency that
# drifts, the default plan's 50% step often needs more than two to settle, and a person asked
# sooner would only ask for more evidence).
SAMPLE_PATIENCE_S = 300
PATIENCE_BAKES = 4
# A latency gate ("TTFT p95 under 300 ms") is a share of requests over the gate: 5% for a p95.
P95_SHARE = 0.05


@dataclass(frozen=True)
class TickState:
    """What a tick knows of the rollout besides its samples."""

    plan: Plan
    gates: SloGates
    step_index: int
    baked_s: float
    resumed: bool  # a person resumed the rollout at this step (asking for more evidence)
    judged: bool  # whether the judge compares arms at this step (every step but 100%)
    scheduled_look_taken: bool = False  # whether this step's first final look was taken


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    evidence: dict[str, object]
    report: Report | None = None  # the judge's look this tick took, if any
    # Whether the action rests on that look (a look that changed nothing is stored sparingly).
    acted_on_look: bool = False
    guardrails: list[GuardrailTest] = field(default_factory=list)


def decide_on(
    state: TickState,
    step_arms: dict[str, ArmSamples],
    look: Callable[[bool, bool], Report | None],
    policy: Policy = DEFAULT_POLICY,
) -> Decision:
    """The tick's decision. `step_arms` are this step's samples per arm (baseline, canary,
    control); `look(final, scheduled)` is the judge's look at the evidence so far (every judged
    step's samples), None at a step it does not judge."""
    step = state.plan.steps[state.step_index]
    canary, baseline = step_arms["canary"], step_arms["baseline"]
    control = step_arms.get("control")
    canary_stats, baseline_stats = arm_stats_of(canary), arm_stats_of(baseline)
    control_stats = arm_stats_of(control) if control is not None and len(control) else None
    evidence: dict[str, object] = {
        "step": state.step_index,
        "weight": step.weight,
        "baked_s": round(state.baked_s, 1),
        "canary": asdict(canary_stats),
        "baseline": asdict(baseline_stats),
    }
    if control_stats is not None:
        evidence["control"] = asdict(control_stats)
    alpha = _guardrail_alpha(state.plan, policy)
    tests = guardrail_tests(canary, canary_stats, state.gates, alpha=alpha)
    breached = [test for test in tests if test.breached]
    if canary_stats.samples >= state.gates.min_guardrail_samples and breached:
        return Decision("rollback", breached[0].describe(), evidence, guardrails=tests)
    # At 100% the baseline gets no traffic: only the candidate's samples can count.
    baseline_needed = step.min_samples if state.judged else 0
    baking = state.baked_s < step.min_bake_s or canary_stats.samples < step.min_samples
    # With a control arm the baseline's share shrinks (to nothing at 50%): the reference the
    # candidate is compared with is the baseline and its copy together.
    reference = baseline_stats.samples + (control_stats.samples if control_stats else 0)
    short_of_baseline = reference < baseline_needed
    final = not (baking or short_of_baseline)
    report = look(final, final and not state.scheduled_look_taken) if state.judged else None

    def decided(action: Action, reason: str, *, acted: bool) -> Decision:
        if report is not None:
            evidence["judge"] = {
                "decision": str(report.decision),
                "final": report.final,
                "reason": report.reason,
            }
        return Decision(action, reason, evidence, report, acted, tests)

    if report is not None and report.decision is JudgeDecision.ROLLBACK:
        return decided("rollback", f"the A/B judge: {report.reason}", acted=True)
    if baking or short_of_baseline:
        return decided("hold", "baking" if baking else "waiting for baseline samples", acted=False)
    last = state.step_index + 1 >= len(state.plan.steps)
    passed = (
        f"step {state.step_index + 1} at {step.weight:g}% held {canary_stats.samples} candidate "
        f"samples over {state.baked_s:.0f} s within the guardrails and SLO gates"
    )
    if report is None:
        return decided("promote" if last else "advance", passed, acted=False)
    if report.decision in (JudgeDecision.PROMOTE, JudgeDecision.CONTINUE):
        return decided(
            "promote" if last else "advance",
            f"{passed}; the A/B judge: {report.reason}",
            acted=True,
        )
    # The judge holds for a person. Metrics short of samples settle with time, so they are
    # waited for a while first. A person who resumed the rollout at this step asked for more
    # evidence, not for the same question again: the step runs until the judge settles it.
    short = judging.waiting_for_samples(report, policy)
    patient = state.baked_s - step.min_bake_s < max(
        SAMPLE_PATIENCE_S, PATIENCE_BAKES * step.min_bake_s
    )
    if (short and patient) or state.resumed:
        why = f"samples for {', '.join(short)}" if short else "a settled verdict (resumed)"
        return decided("hold", f"the A/B judge waits for {why}", acted=False)
    return decided("pause", f"the A/B judge asks a person: {report.reason}", acted=True)


def _guardrail_alpha(plan: Plan, policy: Policy) -> float:
    """Each guardrail's share of the budget: the guardrails' share, over the steps and the four
    guardrails (the steps' samples are tested apart: a breach at 50% is not diluted by 5%)."""
    return policy.guardrail_alpha / len(plan.steps) / 4


def guardrail_tests(
    canary: ArmSamples, stats: ArmStats, gates: SloGates, *, alpha: float
) -> list[GuardrailTest]:
    """The step's candidate samples (and their `stats`, which leave out client disconnects and
    requests the gateway refused: they say nothing about the model) against each SLO limit."""
    tests = [
        share_above_limit(
            "error rate",
            events=stats.errors,
            trials=stats.samples,
            limit=gates.max_error_rate,
            alpha=alpha,
        ),
        share_above_limit(
            "timeout rate",
            events=stats.timeouts,
            trials=stats.samples,
            limit=gates.max_timeout_rate,
            alpha=alpha,
        ),
    ]
    counted = (canary.status != 499) & (canary.finish != "rejected")
    for name, column, gate in (
        ("TTFT", canary.ttft_ms, gates.ttft_p95_ms),
        ("TPOT", canary.tpot_ms, gates.tpot_p95_ms),
    ):
        if not gate:
            continue
        # NaN: no token (TTFT) or fewer than two (TPOT).
        measured = counted & (canary.status < 400) & np.isfinite(column)
        tests.append(
            share_above_limit(
                f"{name} p95 over {gate:g} ms: the share of requests slower than that",
                events=int((measured & (column > gate)).sum()),
                trials=int(measured.sum()),
                limit=P95_SHARE,
                alpha=alpha,
            )
        )
    return tests


def relative_judgment(
    rollout: Rollout, *, now: dt.datetime | None = None, final: bool = False
) -> judging.Look | None:
    """The A/B judge's look at the current step (None at a step it does not compare)."""
    return judging.step_look(rollout, now=now or timezone.now(), final=final)


def decide(rollout: Rollout, now: dt.datetime | None = None, *, record: bool = False) -> Decision:
    """What this tick would do, on the stored samples. `record` stores the judge's look as a
    verdict (the tick does; a page that previews the decision does not)."""
    now = now or timezone.now()
    started = rollout.step_started_at or now  # set on entering RUNNING; never None there
    window, samples = judging.step_window(rollout)
    step_arms = {
        arm: arm_samples.take(arm_samples.step == rollout.step_index)
        for arm, arm_samples in samples.items()
    }
    looks: list[judging.Look] = []

    def look(final: bool, scheduled: bool) -> Report | None:
        taken = judging.look_at(rollout, window, samples, now=now, final=final, scheduled=scheduled)
        if taken is not None:
            looks.append(taken)
        return taken.report if taken is not None else None

    state = TickState(
        plan=rollout.parsed_plan,
        gates=rollout.parsed_gates,
        step_index=rollout.step_index,
        baked_s=(now - started).total_seconds(),
        resumed=rollout.events.filter(
            step_index=rollout.step_index,
            from_state=RolloutState.PAUSED,
            to_state=RolloutState.RUNNING,
        ).exists(),
        judged=rollout.step_index in judging.judged_steps(rollout),
        scheduled_look_taken=judging.scheduled_look_taken(rollout),
    )
    decision = decide_on(state, step_arms, look)
    if looks and "judge" in decision.evidence:
        taken = looks[-1]
        verdict = (
            judging.keep(taken, rollout=rollout, acted=decision.acted_on_look) if record else None
        )
        decision.evidence["judge"] = {
            **dict(decision.evidence["judge"]),  # type: ignore[call-overload]
            "verdict": verdict.pk if verdict is not None else None,
            "summary": str(taken),
        }
    return decision


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
