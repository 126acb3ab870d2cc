"""What a rollout's page shows, as rows the template draws: the plan's timeline, the SLO gates
against each arm's samples, and the manual actions valid in the rollout's state. Reads nothing:
the views pass in the rollout and the stats they fetched."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rollouts.choices import RolloutState
from rollouts.models import Rollout
from rollouts.plans import ArmStats, SloGates

S = RolloutState


@dataclass(frozen=True)
class TimelineStep:
    number: int
    weight: float
    min_bake_s: int
    min_samples: int
    status: str  # done, current, stopped (where a rollout ended short of promotion) or todo


@dataclass(frozen=True)
class GateRow:
    """One SLO gate against the current step's samples of each arm."""

    name: str
    limit: str
    baseline: str
    canary: str
    baseline_ok: bool | None  # None: no samples or no limit to judge by
    canary_ok: bool | None


def timeline(rollout: Rollout) -> list[TimelineStep]:
    current = rollout.step_index
    rows = []
    for index, step in enumerate(rollout.parsed_plan.steps):
        if rollout.state == S.PROMOTED or index < current:
            status = "done"
        elif index == current and rollout.state in (S.RUNNING, S.PAUSED):
            status = "current"
        elif index == current and rollout.state in (S.ROLLED_BACK, S.ABORTED):
            status = "stopped"
        else:
            status = "todo"
        rows.append(TimelineStep(index + 1, step.weight, step.min_bake_s, step.min_samples, status))
    return rows


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} ms"


def _under(value: float | None, limit: float | None, samples: int) -> bool | None:
    if not samples or value is None or limit is None:
        return None
    return value <= limit


def gate_rows(stats: dict[str, ArmStats], gates: SloGates) -> list[GateRow]:
    base, canary = stats["baseline"], stats["canary"]

    def row(
        name: str,
        limit: float | None,
        shown_limit: str,
        measure: Callable[[ArmStats], float | None],
        show: Callable[[float | None], str],
    ) -> GateRow:
        at_base, at_canary = measure(base), measure(canary)
        return GateRow(
            name,
            shown_limit,
            show(at_base),
            show(at_canary),
            _under(at_base, limit, base.samples),
            _under(at_canary, limit, canary.samples),
        )

    def latency_limit(ms: float | None) -> str:
        return f"≤ {ms:g} ms" if ms else "none"

    error, timeout = gates.max_error_rate, gates.max_timeout_rate
    ttft, tpot = gates.ttft_p95_ms, gates.tpot_p95_ms
    return [
        row("Error rate", error, f"≤ {error:.1%}", lambda arm: arm.error_rate, _percent),
        row("Timeout rate", timeout, f"≤ {timeout:.1%}", lambda arm: arm.timeout_rate, _percent),
        row("TTFT p95", ttft, latency_limit(ttft), lambda arm: arm.ttft_p95_ms, _ms),
        row("TPOT p95", tpot, latency_limit(tpot), lambda arm: arm.tpot_p95_ms, _ms),
    ]


def allowed_actions(rollout: Rollout) -> list[str]:
    """The manual actions that make sense in the rollout's state, in the order they are shown.
    The service is still the judge: the state may change between the page and the post."""
    if rollout.state == S.RUNNING:
        actions = ["pause"]
        if rollout.step_index + 1 < len(rollout.parsed_plan.steps):
            actions.append("skip")
        return [*actions, "promote", "rollback", "abort"]
    if rollout.state == S.PAUSED:
        return ["resume", "promote", "rollback", "abort"]
    if rollout.state in (S.PENDING, S.PREFLIGHT):
        return ["abort"]
    return []


ACTION_LABELS = {
    "pause": "Pause",
    "resume": "Resume",
    "skip": "Skip to next step",
    "promote": "Promote now",
    "rollback": "Roll back",
    "abort": "Abort",
}
