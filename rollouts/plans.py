"""Typed rollout plans and SLO gates, parsed at the boundary (never passed around as dicts), and
the figures of one arm that the gates are read against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: Annotated[float, Field(gt=0, le=100)]
    min_bake_s: Annotated[int, Field(ge=0)] = 300
    min_samples: Annotated[int, Field(ge=1)] = 200


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: tuple[Step, ...] = Field(min_length=1)
    # Real models take 10-16 minutes to load: a candidate not ready by then fails cleanly.
    progress_deadline_s: Annotated[int, Field(ge=1)] = 1200

    @model_validator(mode="after")
    def _weights_rise_to_100(self) -> Plan:
        weights = [step.weight for step in self.steps]
        if weights != sorted(set(weights)):
            raise ValueError(f"step weights must strictly increase, got {weights}")
        if weights[-1] != 100:
            raise ValueError("the last step must send 100% to the candidate")
        return self

    @property
    def equal_share_steps(self) -> tuple[int, ...]:
        """The steps where the canary carries the baseline's share (50%): without a control arm,
        the only ones where the two arms' latencies meet the same load."""
        return tuple(i for i, step in enumerate(self.steps) if step.weight == 50)


DEFAULT_PLAN = Plan(steps=(Step(weight=5), Step(weight=25), Step(weight=50), Step(weight=100)))


class SloGates(BaseModel):
    """Absolute limits on the candidate's own samples; crossing one rolls back at once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_p95_ms: Annotated[float, Field(gt=0)] | None = 500
    tpot_p95_ms: Annotated[float, Field(gt=0)] | None = 50
    max_error_rate: Annotated[float, Field(ge=0, le=1)] = 0.05
    max_timeout_rate: Annotated[float, Field(ge=0, le=1)] = 0.05
    # Guardrails need this many candidate samples before a rate can condemn it.
    min_guardrail_samples: Annotated[int, Field(ge=1)] = 20


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
