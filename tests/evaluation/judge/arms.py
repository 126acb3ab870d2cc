"""Synthetic arms for the judge's tests: served chat requests with log-normal latencies, arriving
at a steady rate on a few replicas."""

from __future__ import annotations

from typing import Any

import numpy as np

from evaluation.judge import ArmSamples

# The judge's clusters are one replica over this many seconds (`estimators.WINDOW_S`); the drift
# below is drawn per such cluster, independently of the judge's own code.
WINDOW_S = 10.0


def make_arm(
    rng: np.random.Generator,
    n: int,
    *,
    ttft_factor: float = 1.0,
    tpot_factor: float = 1.0,
    error_rate: float = 0.0,
    tools: float = 0.0,
    tool_invalid: float = 0.05,
    output_median: float = 150.0,
    name: str = "arm",
    replicas: int = 4,
    per_s: float = 50.0,
    start: float = 1.7e9,
    drift: float = 0.0,
    step: int = 0,
    **columns: Any,
) -> ArmSamples:
    """`n` requests arriving `per_s` a second from `start` (unix seconds), in order, each on one
    of `replicas` replicas named `<name>-<i>`. `drift` is the spread (on the log scale) of a
    slowdown that all requests of one replica in one 10 s window share: load, batch mix, a noisy
    neighbour."""
    ts = start + np.arange(n) / per_s
    replica_index = rng.integers(0, replicas, n)
    window = np.floor((ts - start) / WINDOW_S).astype(np.int64)
    cluster = replica_index * (int(window.max(initial=0)) + 1) + window
    shared = np.exp(rng.normal(0.0, drift, int(cluster.max(initial=0)) + 1))[cluster]
    ttft = rng.lognormal(np.log(20), 0.4, n) * ttft_factor * shared
    tpot = rng.lognormal(np.log(3), 0.15, n) * tpot_factor * shared
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
        "cost": output * 0.4e-6,
        "ts": ts,
        "replica": np.array([f"{name}-{i}" for i in replica_index], dtype=np.str_),
        "step": np.full(n, step, dtype=np.int64),
    }
    data.update(columns)
    return ArmSamples.from_columns(data)
