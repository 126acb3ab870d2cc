"""Reads of the evaluation app: one step's samples as the judge's columns, feedback per arm, and
the verdicts of a rollout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.db.models import Count, Q, QuerySet, Subquery

from core.errors import NotFound
from evaluation.choices import POSITIVE_FEEDBACK
from evaluation.judge import ArmSamples
from evaluation.models import DeploymentCost, Feedback, RequestSample, Verdict
from rollouts.choices import RolloutState
from rollouts.models import Rollout
from rollouts.selectors import visible_rollouts
from tenants.models import User

# The arms a rollout compares; route rules' arms ("rule:<name>") belong to neither.
ARMS = ("baseline", "canary", "control")
# The judge's columns, in the order `arm_samples` reads them.
COLUMNS = (
    "status",
    "finish",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "prompt_tokens",
    "prompt_estimate",
    "output_tokens",
    "tool",
    "cost",
    "ts",
    "replica",
    "step",
)


@dataclass(frozen=True)
class Window:
    """Which stored samples a look read: the steps `first_step` to `step` of one rollout (the
    evidence of earlier judged steps carries into later ones), up to a sample id, and the
    feedback counted then (feedback can arrive or change later; the counts keep the look
    reproducible)."""

    rollout_id: int
    step: int
    max_sample_id: int
    feedback: dict[str, tuple[int, int]]  # arm -> (positive, negative)
    # Costs are compared only when both deployments' throughput was entered: an observed
    # throughput follows the load, so a lightly loaded canary would look dearer per token for
    # its idle GPUs alone (see evaluation.costs).
    costs_comparable: bool = True
    # Verdicts stored before evidence carried across steps read their own step alone.
    first_step: int | None = None

    @property
    def steps(self) -> tuple[int, int]:
        return (self.step if self.first_step is None else self.first_step, self.step)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rollout": self.rollout_id,
            "step": self.step,
            "max_sample_id": self.max_sample_id,
            "feedback": {arm: list(counts) for arm, counts in self.feedback.items()},
            "costs_comparable": self.costs_comparable,
            "first_step": self.first_step,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Window:
        feedback = data.get("feedback") or {}
        return cls(
            rollout_id=int(data["rollout"]),
            step=int(data["step"]),
            max_sample_id=int(data["max_sample_id"]),
            feedback={arm: (int(c[0]), int(c[1])) for arm, c in feedback.items()},
            costs_comparable=bool(data.get("costs_comparable", True)),
            first_step=None if data.get("first_step") is None else int(data["first_step"]),
        )


def step_samples(rollout_id: int, step: int) -> QuerySet[RequestSample]:
    return RequestSample.objects.filter(rollout_id=rollout_id, step=step)


def steps_samples(rollout_id: int, steps: tuple[int, int]) -> QuerySet[RequestSample]:
    return RequestSample.objects.filter(
        rollout_id=rollout_id, step__gte=steps[0], step__lte=steps[1]
    )


def current_window(
    rollout_id: int, step: int, *, first_step: int
) -> tuple[Window, dict[str, ArmSamples]]:
    """The samples of steps `first_step` to `step` stored so far, as the judge's columns per
    arm, and the window that names them (with the feedback counted now). Two queries, whatever
    the number of samples."""
    rows = list(
        steps_samples(rollout_id, (first_step, step))
        .filter(arm__in=ARMS)
        .order_by("id")
        .values_list("id", "arm", *COLUMNS)
    )
    max_id = rows[-1][0] if rows else 0
    feedback = feedback_counts(rollout_id, (first_step, step), max_id)
    window = Window(
        rollout_id, step, max_id, feedback, costs_entered(rollout_id), first_step=first_step
    )
    return window, {
        arm: _columns([r[2:] for r in rows if r[1] == arm], window, arm) for arm in ARMS
    }


def costs_entered(rollout_id: int) -> bool:
    """Whether both of the rollout's deployments have an entered throughput (one query)."""
    rollout = Rollout.objects.filter(pk=rollout_id)
    entered = DeploymentCost.objects.filter(
        Q(deployment_id=Subquery(rollout.values("baseline_id")[:1]))
        | Q(deployment_id=Subquery(rollout.values("candidate_id")[:1])),
        throughput_tokens_per_s__isnull=False,
    )
    return entered.count() == 2


def feedback_counts(
    rollout_id: int, steps: tuple[int, int], max_sample_id: int
) -> dict[str, tuple[int, int]]:
    positive = Q(value__in=sorted(POSITIVE_FEEDBACK))
    rows = (
        Feedback.objects.filter(
            sample__rollout_id=rollout_id,
            sample__step__gte=steps[0],
            sample__step__lte=steps[1],
            sample__arm__in=ARMS,
            sample_id__lte=max_sample_id,
        )
        .values("sample__arm")
        .annotate(positive=Count("id", filter=positive), negative=Count("id", filter=~positive))
    )
    counts = dict.fromkeys(ARMS, (0, 0))
    for row in rows:
        counts[row["sample__arm"]] = (row["positive"], row["negative"])
    return counts


def window_samples(window: Window) -> dict[str, ArmSamples]:
    """Both arms' samples in a stored window, as columns (one query, no model instances)."""
    rows = list(
        steps_samples(window.rollout_id, window.steps)
        .filter(arm__in=ARMS, id__lte=window.max_sample_id)
        .order_by("id")
        .values_list("arm", *COLUMNS)
    )
    return {arm: _columns([r[1:] for r in rows if r[0] == arm], window, arm) for arm in ARMS}


def _columns(rows: list[tuple[Any, ...]], window: Window, arm: str) -> ArmSamples:
    positive, negative = window.feedback.get(arm, (0, 0))
    columns = (
        {name: list(values) for name, values in zip(COLUMNS, zip(*rows, strict=True), strict=True)}
        if rows
        else {}
    )
    if columns:
        # The gateway records a cost of 0 when the deployment's unit cost is not known: that is
        # no data about cost (the judge leaves such requests out), not a free request.
        columns["cost"] = [
            cost if cost > 0 and window.costs_comparable else None for cost in columns["cost"]
        ]
        columns["ts"] = [at.timestamp() for at in columns["ts"]]
    return ArmSamples.from_columns(columns, feedback_positive=positive, feedback_negative=negative)


def rollout_verdicts(rollout_id: int) -> QuerySet[Verdict]:
    return Verdict.objects.filter(rollout_id=rollout_id).order_by("looked_at", "id")


def latest_verdict(rollout_id: int, step: int | None = None) -> Verdict | None:
    verdicts = Verdict.objects.filter(rollout_id=rollout_id)
    if step is not None:
        verdicts = verdicts.filter(step=step)
    return verdicts.order_by("-looked_at", "-id").first()


def report_rollout(user: User | AnonymousUser, rollout_id: int) -> Rollout:
    """A rollout for its A/B report, if the user may see it (the same rule as the rollout page:
    a rollout on a route the user may not see does not exist for them)."""
    rollout = (
        visible_rollouts(user)
        .select_related(
            "route",
            "baseline__artifact",
            "baseline__fleet",
            "baseline__cost",
            "candidate__artifact",
            "candidate__fleet",
            "candidate__cost",
            "control__artifact",
            "control__fleet",
            "control__cost",
        )
        .prefetch_related(
            "baseline__fleet__replicas", "candidate__fleet__replicas", "control__fleet__replicas"
        )
        .filter(pk=rollout_id)
        .first()
    )
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} does not exist")
    return rollout


@dataclass(frozen=True)
class CurrentVerdict:
    """A rollout's verdict as an external controller reads it (Argo Rollouts, Flagger)."""

    decision: str  # continue, promote, hold, rollback, or pending (nothing judged yet)
    reason: str
    step: int
    final: bool
    verdict: Verdict | None

    @property
    def value(self) -> int:
        """1 healthy (continue, promote), -1 roll back, 0 undecided (hold, pending): Argo reads
        1 as success, -1 as failure and anything else as inconclusive (which pauses it)."""
        return {"continue": 1, "promote": 1, "rollback": -1}.get(self.decision, 0)


def current_verdict(rollout: Rollout) -> CurrentVerdict:
    """The rollout's state first (an ended rollout's outcome is final), then the judge's last
    stored look."""
    latest = latest_verdict(rollout.pk)
    step = latest.step if latest else rollout.step_index
    if rollout.state in (RolloutState.ROLLED_BACK, RolloutState.ABORTED, RolloutState.FAILED):
        return CurrentVerdict("rollback", f"the rollout {rollout.state}", step, True, latest)
    if rollout.state == RolloutState.PROMOTED:
        return CurrentVerdict("promote", "the rollout was promoted", step, True, latest)
    if latest is None:
        return CurrentVerdict("pending", "the judge has not looked yet", step, False, None)
    return CurrentVerdict(latest.decision, latest.reason, step, latest.final, latest)
