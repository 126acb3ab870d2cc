"""The judge at work on a rollout: read one step's samples of both arms, ask the statistical core
(`evaluation.judge`), and keep the answer as a `Verdict` that names the samples it read.

The engine (`orchestration.engine`) looks on every tick: interim looks while the step
bakes (they may only roll back), a final look once bake time and minimum samples are met. Looks
are not all stored: a 2 s tick would write thousands of rows a day. A look is kept when the
engine acts on it, when its decision or any metric's outcome differs from the last one kept for
the step, or when the last one kept is older than `KEEP_EVERY_S`.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from evaluation import selectors, services
from evaluation.judge import (
    DEFAULT_POLICY,
    ArmSamples,
    Decision,
    MetricVerdict,
    Outcome,
    Policy,
    Report,
    ScheduledLook,
    judge,
)
from evaluation.judge.core import TOO_FEW_SAMPLES
from evaluation.models import Verdict
from rollouts.models import Rollout

KEEP_EVERY_S = 60


@dataclass(frozen=True)
class Look:
    rollout_id: int
    step: int
    looked_at: dt.datetime
    final: bool
    report: Report
    window: selectors.Window

    @property
    def decision(self) -> Decision:
        return self.report.decision

    def __str__(self) -> str:
        look = "final" if self.final else "interim"
        return f"{self.decision} ({look} look at step {self.step + 1}): {self.report.reason}"


def waiting_for_samples(report: Report, policy: Policy = DEFAULT_POLICY) -> list[str]:
    """The blocking metrics that more samples are likely to settle: too few so far, or an
    estimate inside the pass margin whose bound has yet to come under it. Time settles them (the
    bounds are valid at every look, so waiting costs no error), so they are no reason to call a
    person yet."""
    blocking = {m.name for m in policy.metrics if m.blocking}
    return [
        v.metric
        for v in report.verdicts
        if v.outcome is Outcome.INCONCLUSIVE
        and v.metric in blocking
        and (v.rule.startswith(TOO_FEW_SAMPLES) or _leans_to_pass(v))
    ]


def _leans_to_pass(verdict: MetricVerdict) -> bool:
    margin = verdict.pass_threshold  # signed in the worse direction
    if not math.isfinite(margin) or not math.isfinite(verdict.difference) or margin == 0:
        return False
    return verdict.difference * math.copysign(1.0, margin) < abs(margin)


def judged_steps(rollout: Rollout) -> list[int]:
    """The steps the judge compares arms in: every step but 100%, where the baseline gets no
    traffic (that step runs on the guardrails and SLO gates alone)."""
    return [i for i, step in enumerate(rollout.parsed_plan.steps) if step.weight < 100]


def report_of(
    window: selectors.Window,
    *,
    rollout: Rollout,
    final: bool,
    scheduled: bool = False,
    samples: dict[str, ArmSamples] | None = None,
) -> Report:
    """The judge's report on exactly the samples of `window`: what a look computed, and what
    recomputing a stored verdict computes again. `scheduled`: the step's scheduled look (its
    first final one), one of as many as the plan has judged steps."""
    arms = samples if samples is not None else selectors.window_samples(window)
    judged = judged_steps(rollout)
    control = arms["control"] if len(arms["control"]) else None  # only rollouts with one
    return judge(
        arms["baseline"],
        arms["canary"],
        DEFAULT_POLICY,
        control=control,
        final=final,
        last_step=bool(judged) and window.step == judged[-1],
        # A plan without a 50% step compares latencies across its steps' loads, as it can.
        equal_share_steps=rollout.parsed_plan.equal_share_steps,
        scheduled=ScheduledLook(judged.index(window.step), len(judged)) if scheduled else None,
    )


def step_window(rollout: Rollout) -> tuple[selectors.Window, dict[str, ArmSamples]]:
    """The samples a look at the current step reads: every judged step's so far (the evidence
    of the 5% step carries into the 25% one), or the current step's alone where none is judged
    (the 100% step, whose samples only the guardrails read)."""
    step = rollout.step_index
    judged = judged_steps(rollout)
    first = judged[0] if step in judged else step
    return selectors.current_window(rollout.pk, step, first_step=first)


def look_at(
    rollout: Rollout,
    window: selectors.Window,
    samples: dict[str, ArmSamples],
    *,
    now: dt.datetime,
    final: bool,
    scheduled: bool = False,
) -> Look | None:
    """The judge's look at `samples` (read for `window`); None at a step it does not compare."""
    if window.step not in judged_steps(rollout):
        return None
    report = report_of(window, rollout=rollout, final=final, scheduled=scheduled, samples=samples)
    return Look(rollout.pk, window.step, now, final, report, window)


def step_look(rollout: Rollout, *, now: dt.datetime, final: bool) -> Look | None:
    """A look at the rollout's current step (never its scheduled one: the tick takes that); None
    at a step the judge does not compare."""
    if rollout.step_index not in judged_steps(rollout):
        return None
    window, samples = step_window(rollout)
    return look_at(rollout, window, samples, now=now, final=final)


def scheduled_look_taken(rollout: Rollout) -> bool:
    """Whether the current step has had its scheduled look: its first final look, which `keep`
    always stores."""
    return rollout.verdicts.filter(step=rollout.step_index, final=True).exists()


def _outcomes(report: dict[str, Any]) -> tuple[object, ...]:
    verdicts = report.get("verdicts") or []
    return (report.get("decision"), *((v["metric"], v["outcome"]) for v in verdicts))


def keep(look: Look, *, rollout: Rollout, acted: bool) -> Verdict | None:
    """Stores the look when it is worth a row (see the module's docstring). A scheduled look is
    always kept: the next tick reads from it that the step's scheduled look was taken."""
    report = look.report.to_dict()
    if not (acted or look.report.scheduled):
        last = selectors.latest_verdict(look.rollout_id, look.step)
        if (
            last is not None
            and _outcomes(last.report) == _outcomes(report)
            and (look.looked_at - last.looked_at).total_seconds() < KEEP_EVERY_S
        ):
            return None
    return services.verdict_record(
        rollout=rollout,
        step=look.step,
        looked_at=look.looked_at,
        final=look.final,
        decision=str(look.decision),
        reason=look.report.reason,
        report=report,
        window=look.window.to_dict(),
    )


def recompute(verdict: Verdict) -> Report:
    """The report a stored verdict's samples give today (the same, while they are retained)."""
    window = selectors.Window.from_dict(verdict.window)
    return report_of(
        window,
        rollout=verdict.rollout,
        final=verdict.final,
        scheduled=bool(verdict.report.get("scheduled", False)),
    )
