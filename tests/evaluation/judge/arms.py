"""Synthetic arms for the judge's tests: served chat requests with log-normal latencies."""

from __future__ import annotations

from typing import Any

import numpy as np

from evaluation.judge import ArmSamples


def make_arm(
    rng: np.random.Generator,
    n: int,
    *,
    ttft_factor: float = 1.0,
    tpot_factor: float = 1.0,
    concurrency: int | np.ndarray = 4,
    load_slowdown: float = 0.0,
    error_rate: float = 0.0,
    tools: float = 0.0,
    tool_invalid: float = 0.05,
    output_median: float = 150.0,
    **columns: Any,
) -> ArmSamples:
    """`load_slowdown` makes latency grow with concurrency (x (1 + slowdown * concurrency))."""
    conc = np.broadcast_to(np.asarray(concurrency, dtype=np.int64), (n,)).copy()
    load = 1 + load_slowdown * conc
    ttft = rng.lognormal(np.log(20), 0.4, n) * ttft_factor * load
    tpot = rng.lognormal(np.log(3), 0.15, n) * tpot_factor * load
    output = np.clip(np.round(rng.lognormal(np.log(output_median), 0.8, n)), 2, 1024)
    status = np.where(rng.random(n) < error_rate, 500, 200)
    finish = np.where(status == 500, "error", np.where(output >= 1024, "length", "stop"))
    tool = np.full(n, "", dtype="<U16")
    with_tools = rng.random(n) < tools
    tool[with_tools] = np.where(
        rng.random(int(with_tools.sum())) < tool_invalid, "invalid_json", "valid"
    )
    tool[status == 500] = ""
    data: dict[str, Any] = {
        "status": status,
        "finish": finish,
        "ttft_ms": np.where(status == 500, np.nan, ttft),
        "tpot_ms": np.where(status == 500, np.nan, tpot),
        "e2e_ms": ttft + output * tpot,
        "prompt_tokens": rng.integers(50, 200, n),
        "output_tokens": output.astype(np.int64),
        "tool": tool,
        "concurrency": conc,
        "cost": output * 0.4e-6,
    }
    data.update(columns)
    return ArmSamples.from_columns(data)
