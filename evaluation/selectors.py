"""Reads of the evaluation app: one step's samples as the judge's columns, feedback per arm, and
the verdicts of a rollout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Max, Q, QuerySet

from evaluation.choices import POSITIVE_FEEDBACK
from evaluation.judge import ArmSamples
from evaluation.models import Feedback, RequestSample, Verdict

# The arms a rollout compares; route rules' arms ("rule:<name>") belong to neither.
ARMS = ("baseline", "canary")
# The judge's columns, in the order `arm_samples` reads them.
COLUMNS = (
    "status",
    "finish",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "prompt_tokens",
    "output_tokens",
    "tool",
    "concurrency",
    "cost",
)


@dataclass(frozen=True)
class Window:
    """Which stored samples a look read: one step of one rollout, up to a sample id, and the
    feedback counted then (feedback can arrive or change later; the counts keep the look
    reproducible)."""

    rollout_id: int
    step: int
    max_sample_id: int
    feedback: dict[str, tuple[int, int]]  # arm -> (positive, negative)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rollout": self.rollout_id,
            "step": self.step,
            "max_sample_id": self.max_sample_id,
            "feedback": {arm: list(counts) for arm, counts in self.feedback.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Window:
        feedback = data.get("feedback") or {}
        return cls(
            rollout_id=int(data["rollout"]),
            step=int(data["step"]),
            max_sample_id=int(data["max_sample_id"]),
            feedback={arm: (int(c[0]), int(c[1])) for arm, c in feedback.items()},
        )


def step_samples(rollout_id: int, step: int) -> QuerySet[RequestSample]:
    return RequestSample.objects.filter(rollout_id=rollout_id, step=step)


def current_window(rollout_id: int, step: int) -> Window:
    """The step's samples stored so far, and its feedback counted now."""
    samples = step_samples(rollout_id, step)
    max_id = samples.aggregate(last=Max("id"))["last"] or 0
    return Window(rollout_id, step, max_id, feedback_counts(rollout_id, step, max_id))


def feedback_counts(rollout_id: int, step: int, max_sample_id: int) -> dict[str, tuple[int, int]]:
    positive = Q(value__in=sorted(POSITIVE_FEEDBACK))
    rows = (
        Feedback.objects.filter(
            sample__rollout_id=rollout_id,
            sample__step=step,
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


def arm_samples(window: Window, arm: str) -> ArmSamples:
    """One arm's samples in the window, as columns (one query, no model instances)."""
    rows = (
        step_samples(window.rollout_id, window.step)
        .filter(arm=arm, id__lte=window.max_sample_id)
        .order_by("id")
        .values_list(*COLUMNS)
    )
    positive, negative = window.feedback.get(arm, (0, 0))
    columns = list(zip(*rows, strict=True)) if rows else []
    return ArmSamples.from_columns(
        {name: list(values) for name, values in zip(COLUMNS, columns, strict=True)},
        feedback_positive=positive,
        feedback_negative=negative,
    )


def rollout_verdicts(rollout_id: int) -> QuerySet[Verdict]:
    return Verdict.objects.filter(rollout_id=rollout_id).order_by("looked_at", "id")


def latest_verdict(rollout_id: int, step: int | None = None) -> Verdict | None:
    verdicts = Verdict.objects.filter(rollout_id=rollout_id)
    if step is not None:
        verdicts = verdicts.filter(step=step)
    return verdicts.order_by("-looked_at", "-id").first()
