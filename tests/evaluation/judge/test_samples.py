"""ArmSamples: columns from stored rows, and clear refusals of what the gateway never writes."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import numpy as np
import pytest

from evaluation.judge import ArmSamples


def row(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "status": 200,
        "finish": "stop",
        "ttft_ms": 12.5,
        "tpot_ms": 2.0,
        "e2e_ms": 300.0,
        "prompt_tokens": 100,
        "output_tokens": 140,
        "tool": "",
        "cost": 0.0001,
        "ts": 1_700_000_000.5,
        "replica": "r0",
        "step": 0,
    }
    return base | overrides


def test_from_rows_turns_missing_timings_into_nan_and_missing_text_into_empty() -> None:
    arm = ArmSamples.from_rows(
        [
            row(),
            row(status=500, finish=None, ttft_ms=None, tpot_ms=None, tool=None, replica=None),
        ],
        feedback_positive=3,
    )
    assert len(arm) == 2
    assert math.isnan(arm.ttft_ms[1])
    assert math.isnan(arm.tpot_ms[1])
    assert arm.finish.tolist() == ["stop", ""]
    assert arm.tool.tolist() == ["", ""]
    assert arm.replica.tolist() == ["r0", ""]
    assert arm.status.dtype == np.int64
    assert arm.feedback_positive == 3


def test_from_rows_reads_arrival_times_as_unix_seconds() -> None:
    arrived = dt.datetime(2026, 1, 2, 3, 4, 5, 250_000, tzinfo=dt.UTC)
    arm = ArmSamples.from_rows([row(ts=arrived, step=2), row()])
    assert arm.ts.dtype == np.float64
    assert arm.ts.tolist() == [arrived.timestamp(), 1_700_000_000.5]
    assert arm.step.tolist() == [2, 0]


def test_from_rows_names_the_missing_field() -> None:
    broken = row()
    del broken["replica"]
    with pytest.raises(ValueError, match="row 1 has no 'replica'"):
        ArmSamples.from_rows([row(), broken])
    with pytest.raises(ValueError, match="row 0: step may not be None"):
        ArmSamples.from_rows([row(step=None)])


def test_unknown_finish_reason_is_refused_with_the_value() -> None:
    with pytest.raises(ValueError, match=r"finish has unknown values \['cancelled'\]"):
        ArmSamples.from_rows([row(finish="cancelled")])


def test_unknown_tool_outcome_is_refused() -> None:
    with pytest.raises(ValueError, match="tool has unknown values"):
        ArmSamples.from_rows([row(tool="maybe")])


def test_columns_of_different_lengths_are_refused() -> None:
    arm = ArmSamples.from_rows([row(), row()])
    with pytest.raises(ValueError, match="status has 2, cost has 1"):
        ArmSamples(**{**arm.__dict__, "cost": np.array([0.1])})


def test_negative_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="output_tokens has negative values"):
        ArmSamples.from_rows([row(output_tokens=-1)])


def test_empty_arm_and_pooling_keep_feedback_counts() -> None:
    empty = ArmSamples.empty()
    assert len(empty) == 0
    one = ArmSamples.from_rows([row()], feedback_positive=1, feedback_negative=2)
    pooled = ArmSamples.concat(empty, one, one)
    assert len(pooled) == 2
    assert (pooled.feedback_positive, pooled.feedback_negative) == (2, 4)
    assert len(pooled.take(slice(0, 1))) == 1
