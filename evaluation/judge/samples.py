"""One arm's requests in a judging window, as equal-length numpy columns.

The judge works on columns rather than on rows so that an interim look over tens of thousands of
requests costs a few sorts, not a Python loop. `from_rows` builds the columns from the records the
samples consumer stores (the field names of `evaluation.models.RequestSample`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

# The values the gateway writes; anything else is a bug upstream and is refused with its name.
FINISH_VALUES = frozenset({"stop", "length", "tool_calls", "abort", "error", "rejected", ""})
# `unchecked`: the gateway could not check the arguments against the tenant's schema.
TOOL_VALUES = frozenset({"", "no_call", "valid", "invalid_json", "invalid_schema", "unchecked"})
CLIENT_LEFT = 499


@dataclass(frozen=True)
class ArmSamples:
    status: npt.NDArray[np.int64]  # HTTP status; 499 = the client left
    finish: npt.NDArray[np.str_]  # stop, length, tool_calls, abort, error, rejected, ""
    ttft_ms: npt.NDArray[np.float64]  # NaN when no token came
    tpot_ms: npt.NDArray[np.float64]  # NaN when fewer than 2 tokens came
    e2e_ms: npt.NDArray[np.float64]
    prompt_tokens: npt.NDArray[np.int64]
    # The gateway's estimate of the prompt's tokens, made from what the client sent before an arm
    # was chosen: unlike prompt_tokens (each arm's model counts its own), the same whatever arm
    # serves it, so the judge may adjust for it (0: not known, as in records of older gateways).
    prompt_estimate: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    tool: npt.NDArray[np.str_]  # "" (no tools), no_call, valid, invalid_json, invalid_schema,
    # unchecked
    cost: npt.NDArray[np.float64]  # dollars
    ts: npt.NDArray[np.float64]  # unix seconds at arrival: requests close in time share a cluster
    replica: npt.NDArray[np.str_]  # the replica that served it ("" when none did)
    step: npt.NDArray[np.int64]  # the rollout step it arrived in
    feedback_positive: int = 0  # user feedback counted for this arm (thumbs up, good outcome)
    feedback_negative: int = 0

    def __post_init__(self) -> None:
        n = len(self.status)
        for column in _COLUMNS:
            value = getattr(self, column)
            if not isinstance(value, np.ndarray) or value.ndim != 1:
                raise TypeError(f"ArmSamples.{column} must be a 1-D numpy array")
            if len(value) != n:
                raise ValueError(
                    f"ArmSamples columns must have equal lengths: status has {n}, "
                    f"{column} has {len(value)}"
                )
        if self.feedback_positive < 0 or self.feedback_negative < 0:
            raise ValueError("feedback counts must be zero or more")

    def __len__(self) -> int:
        return len(self.status)

    @classmethod
    def empty(cls) -> ArmSamples:
        return cls.from_columns({})

    @classmethod
    def from_columns(
        cls,
        columns: Mapping[str, Any],
        *,
        feedback_positive: int = 0,
        feedback_negative: int = 0,
    ) -> ArmSamples:
        """Coerces array-likes (lists, arrays of other dtypes) into the column dtypes and checks
        the values. Missing columns are only allowed when every given column is empty, but for
        the prompt estimate (zeros: not known)."""
        unknown = set(columns) - set(_COLUMNS)
        if unknown:
            raise ValueError(f"unknown ArmSamples columns: {sorted(unknown)}")
        n = len(next(iter(columns.values()))) if columns else 0
        arrays: dict[str, Any] = {}
        for column, dtype in _COLUMNS.items():
            if column in columns:
                arrays[column] = np.asarray(columns[column], dtype=dtype)
            elif n == 0 or column in _ZERO_WHEN_MISSING:
                arrays[column] = np.zeros(n, dtype=dtype)
            else:
                raise ValueError(f"ArmSamples column {column} is missing")
        samples = cls(
            **arrays, feedback_positive=feedback_positive, feedback_negative=feedback_negative
        )
        samples.check_values()
        return samples

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[Mapping[str, object]],
        *,
        feedback_positive: int = 0,
        feedback_negative: int = 0,
    ) -> ArmSamples:
        """Rows with the stored sample's field names (`ts` as a datetime or unix seconds);
        None in ttft_ms/tpot_ms becomes NaN and None in finish/tool/replica becomes ""."""
        lists: dict[str, list[Any]] = {column: [] for column in _COLUMNS}
        for index, row in enumerate(rows):
            for column in _COLUMNS:
                if column not in row and column not in _ZERO_WHEN_MISSING:
                    raise ValueError(f"row {index} has no {column!r}")
                value = row.get(column, 0)
                if value is None:
                    if column in _NULLABLE_FLOAT:
                        value = np.nan
                    elif column in _NULLABLE_TEXT:
                        value = ""
                    else:
                        raise ValueError(f"row {index}: {column} may not be None")
                if column == "ts" and hasattr(value, "timestamp"):
                    value = value.timestamp()
                lists[column].append(value)
        return cls.from_columns(
            lists, feedback_positive=feedback_positive, feedback_negative=feedback_negative
        )

    def check_values(self) -> None:
        """Refuses values the gateway never writes, naming the column and the value."""
        for column, allowed in (("finish", FINISH_VALUES), ("tool", TOOL_VALUES)):
            seen = set(np.unique(getattr(self, column)).tolist())
            if not seen <= allowed:
                raise ValueError(
                    f"ArmSamples.{column} has unknown values {sorted(seen - allowed)}; "
                    f"expected one of {sorted(allowed)}"
                )
        for column in ("prompt_tokens", "prompt_estimate", "output_tokens"):
            if len(self) and int(getattr(self, column).min()) < 0:
                raise ValueError(f"ArmSamples.{column} has negative values")

    def take(self, index: npt.NDArray[np.bool_] | npt.NDArray[np.int64] | slice) -> ArmSamples:
        """The rows selected by a mask, indices or a slice (feedback counts are kept)."""
        return ArmSamples(
            **{column: getattr(self, column)[index] for column in _COLUMNS},
            feedback_positive=self.feedback_positive,
            feedback_negative=self.feedback_negative,
        )

    @classmethod
    def concat(cls, *arms: ArmSamples) -> ArmSamples:
        """Pools arms that run the same model (the baseline and its control copy)."""
        return cls(
            **{column: np.concatenate([getattr(a, column) for a in arms]) for column in _COLUMNS},
            feedback_positive=sum(a.feedback_positive for a in arms),
            feedback_negative=sum(a.feedback_negative for a in arms),
        )


# The column dtypes, in declaration order.
_COLUMNS: dict[str, type] = {
    "status": np.int64,
    "finish": np.str_,
    "ttft_ms": np.float64,
    "tpot_ms": np.float64,
    "e2e_ms": np.float64,
    "prompt_tokens": np.int64,
    "prompt_estimate": np.int64,
    "output_tokens": np.int64,
    "tool": np.str_,
    "cost": np.float64,
    "ts": np.float64,
    "replica": np.str_,
    "step": np.int64,
}
_NULLABLE_FLOAT = frozenset({"ttft_ms", "tpot_ms"})
_NULLABLE_TEXT = frozenset({"finish", "tool", "replica"})
# Columns that older records (and callers) may leave out: all zeros then.
_ZERO_WHEN_MISSING = frozenset({"prompt_estimate"})
