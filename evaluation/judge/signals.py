"""Which requests count for which metric.

Refused requests (finish "rejected": budget limits, shedding) never reached a model: they are the
tenant's policy, not the deployment's doing, and count for no metric at all (the tenants' usage
pages show them). A client that left (499) cut its own request short: it is kept out of the
latency and error denominators and counted in the timeout-and-abort rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from evaluation.judge.samples import CLIENT_LEFT, ArmSamples

Mask = npt.NDArray[np.bool_]
# Gateway deadlines and upstream timeouts.
TIMEOUT_STATUSES = (408, 504)


def served(arm: ArmSamples) -> Mask:
    """Requests a model answered in full: what latencies, lengths and costs are measured on."""
    # (numpy's stubs type comparisons of string arrays as Any; the annotation restores it.)
    mask: Mask = (
        (arm.status < 400)
        & (arm.finish != "rejected")
        & (arm.finish != "abort")
        & (arm.finish != "error")
    )
    return mask


def rejected(arm: ArmSamples) -> Mask:
    mask: Mask = arm.finish == "rejected"
    return mask


def client_left(arm: ArmSamples) -> Mask:
    mask: Mask = (arm.status == CLIENT_LEFT) | (arm.finish == "abort")
    return mask


@dataclass(frozen=True)
class ArmMasks:
    """The masks every metric reads, computed once per arm and call (string comparisons over
    tens of thousands of rows are what a judge call spends most on otherwise)."""

    served: Mask
    rejected: Mask
    client_left: Mask

    @classmethod
    def of(cls, arm: ArmSamples) -> ArmMasks:
        return cls(served(arm), rejected(arm), client_left(arm))


@dataclass(frozen=True)
class Counts:
    events: int
    eligible: int

    @property
    def share(self) -> float:
        return self.events / self.eligible if self.eligible else math.nan


def rate_counts(arm: ArmSamples, signal: str, masks: ArmMasks | None = None) -> Counts:
    """The numerator and denominator of a named rate."""
    if signal == "feedback_positive":
        total = arm.feedback_positive + arm.feedback_negative
        return Counts(arm.feedback_positive, total)
    eligible, event = rate_masks(arm, signal, masks or ArmMasks.of(arm))
    return Counts(int((eligible & event).sum()), int(eligible.sum()))


def rate_masks(arm: ArmSamples, signal: str, masks: ArmMasks) -> tuple[Mask, Mask]:
    """Which requests a named rate counts (eligible), and which of them are its events."""
    not_rejected = ~masks.rejected
    if signal == "error":
        eligible = not_rejected & ~masks.client_left
        event = (arm.status >= 500) | (arm.finish == "error")
    elif signal == "timeout_abort":
        # Clients leaving is itself a signal (a slow model makes people give up), so this
        # denominator keeps them.
        eligible = not_rejected
        event = masks.client_left | np.isin(arm.status, TIMEOUT_STATUSES)
    elif signal == "truncation":
        eligible = masks.served
        event = arm.finish == "length"
    elif signal == "tool_success":
        # The gateway cannot tell whether a call was needed, only whether one was broken: a
        # request with tools succeeds unless its call had invalid JSON or broke the schema. A
        # call the gateway could not check (a hostile or oversized schema) is neither.
        eligible = not_rejected & (arm.tool != "") & (arm.tool != "unchecked")
        event = (arm.tool == "valid") | (arm.tool == "no_call")
    else:
        raise ValueError(f"unknown rate {signal!r}")
    return eligible, event


def column(arm: ArmSamples, signal: str) -> tuple[npt.NDArray[np.float64], Mask]:
    """A per-request column over served requests with a finite value (NaN TTFT and TPOT, for
    requests that produced no or one token, drop out here)."""
    values = np.asarray(getattr(arm, signal), dtype=np.float64)
    return values, served(arm) & np.isfinite(values)
