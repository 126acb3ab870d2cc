"""How often the engine rolls back or holds a healthy candidate, and how fast it catches a bad one.

    .venv/bin/python bench/judge_calibration.py [--rollouts 500] [--tick 10] [--workers 2]
        [--log PREFIX]

Simulates whole rollouts offline and decides each tick with `orchestration.engine.decide_on`, the
function the Celery tick calls: the SLO guardrails, the judge's interim and final looks with the
evidence of earlier steps carried, the wait for samples, the pause for a person and a person's
resume (the harness resumes a paused rollout once, as a release manager asking for more evidence
would, and counts it as held). The default plan (5% -> 25% -> 50% -> 100%, 300 s bake, 200
minimum samples) at 40 requests/s, each deployment on its own four replicas, requests drawn from
distributions shaped on what real vLLM 0.32 showed on a 2-core CPU machine (TTFT that grows with
the replica's load and the prompt, with a heavy tail of stalls; TPOT that grows with the batch;
log-normal lengths with a max_tokens cap; tool calls, errors, client aborts, timeouts, budget
refusals, costs, feedback).

Requests are not independent here, as they are not in production: they arrive in conversations
(a session's turns share an arm), each replica's latency drifts (an AR(1) in log-latency over
its requests), a replica can be slow for the whole rollout, traffic comes in bursts, and a few
tenants dominate, one of them bursting into its budget with requests that carry no `user`.
The `replay` scenario writes every request as the gateway's own record (`gateway.sample.Sample`,
JSON) and reads it back through the samples consumer's parser (`core.streams.sample_parse`) and
the stored columns (`ArmSamples.from_rows`), assigning arms with the gateway's own hash on the
gateway's own session keys (`gateway.sessions`).

The engine ticks every 2 s; the bounds its interim looks read are anytime-valid, so a coarser
`--tick` changes the time to a decision by at most one tick and can only lower the error rates
of those; each step's scheduled look (its first final one) is a single fixed look either way,
taken up to one tick after the step has baked.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("SECRET_KEY", "bench-secret-key-0123456789-0123456789-0123456789")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")

import django

django.setup()

from core.streams import sample_parse  # noqa: E402
from evaluation.judge import DEFAULT_POLICY, ArmSamples, Report, ScheduledLook, judge  # noqa: E402
from gateway.routing import choose_arm  # noqa: E402
from gateway.sample import Sample  # noqa: E402
from gateway.sessions import session_key  # noqa: E402
from gateway.snapshot import Arm, Route  # noqa: E402
from orchestration.engine import TickState, decide_on  # noqa: E402
from rollouts.plans import DEFAULT_PLAN, SloGates  # noqa: E402

RATE_PER_S = 40.0
REPLICAS = 4  # per deployment
MAX_TOKENS = 1024
DOLLARS_PER_MTOK = 0.40
# The SLO gates of these rollouts: the default limits on errors and timeouts, and latency gates
# the baseline meets with room at full load (p95 TTFT about 330 ms, TPOT about 12 ms there).
GATES = SloGates(ttft_p95_ms=600, tpot_p95_ms=25)
# How far the gateway's estimate of a prompt (characters / 4) strays from the model's count, as
# the sd of their log ratio: English prose is near 4 characters a token, code, JSON and other
# scripts are not.
ESTIMATE_SD = 0.2
CHUNK_S = 30.0  # requests are drawn this many seconds at a time, as the clock reaches them
# How long a resumed step may run before the harness stops waiting (the engine would wait on).
RESUMED_LIMIT_S = 2400


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
class Traffic:
    """How requests arrive and how the fleet behaves, whatever the model."""

    drift_sd: float = 0.0  # stationary sd of each replica's AR(1) drift in log-latency
    drift_memory: float = 200.0  # requests of one replica over which the drift decorrelates
    slow_replica: float = 1.0  # latency factor of one of the candidate's replicas
    bursts: bool = False  # the rate triples for 20 s of every 2 minutes
    skew: bool = False  # three tenants, one with 60% of requests, bursting into its budget
    turns: float = 3.0  # mean requests per conversation (a session keeps its arm)


@dataclass(frozen=True)
class Scenario:
    name: str
    candidate: Model = Model()
    traffic: Traffic = Traffic()
    control: bool = True
    healthy: bool = False  # A/A: any rollback is a false one
    replay: bool = False
    steps: int = 4  # how many steps of the plan to run (regressions: caught by the 25% step)
    target: str = ""


BASE = Model()
AA = "A/A"
SCENARIOS: dict[str, Scenario] = {
    "aa": Scenario("A/A, independent requests", healthy=True, target=AA),
    "aa_no_control": Scenario("A/A, no control arm", control=False, healthy=True, target=AA),
    "aa_drift_05": Scenario(
        "A/A, drift sd 0.05", traffic=Traffic(drift_sd=0.05), healthy=True, target=AA
    ),
    "aa_drift_10": Scenario(
        "A/A, drift sd 0.10", traffic=Traffic(drift_sd=0.10), healthy=True, target=AA
    ),
    "aa_slow_replica": Scenario(
        "A/A, a candidate replica 25% slower",
        traffic=Traffic(slow_replica=1.25),
        healthy=True,
        target=AA,
    ),
    "aa_bursts": Scenario(
        "A/A, traffic bursts", traffic=Traffic(bursts=True), healthy=True, target=AA
    ),
    "aa_skew": Scenario(
        "A/A, tenant skew, budget burst, no user",
        traffic=Traffic(skew=True),
        healthy=True,
        target=AA,
    ),
    "aa_replay": Scenario(
        "A/A, gateway records replayed",
        traffic=Traffic(drift_sd=0.05, skew=True),
        healthy=True,
        replay=True,
        target=AA,
    ),
    "ttft": Scenario("TTFT 20% worse", replace(BASE, ttft_factor=1.2), steps=2, target="catch"),
    "ttft_tail": Scenario(
        "p95 TTFT 20% worse, p50 not", replace(BASE, ttft_tail_factor=1.2), steps=2, target="catch"
    ),
    "tpot": Scenario("TPOT 20% worse", replace(BASE, tpot_factor=1.2), steps=2, target="catch"),
    "tools": Scenario(
        "tool success 95% -> 90%", replace(BASE, tool_invalid=0.10), steps=2, target="catch"
    ),
    "errors": Scenario(
        "errors 0.5% -> 2%", replace(BASE, error_rate=0.02), steps=2, target="catch"
    ),
    "tokens": Scenario(
        "output tokens 25% more", replace(BASE, output_median=187.5), steps=2, target="catch"
    ),
    "within_margin": Scenario(
        "TTFT 5% worse (10% margin)", replace(BASE, ttft_factor=1.05), target="no rollback"
    ),
    "at_margin": Scenario(
        "TTFT 10% worse (at the pass margin)", replace(BASE, ttft_factor=1.10), target="no pass"
    ),
}


# --- the simulated fleet ---------------------------------------------------------------------


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


class Deployment:
    """One deployment's replicas, with their drift carried from one chunk of time to the next."""

    def __init__(
        self, rng: np.random.Generator, model: Model, traffic: Traffic, *, slow: bool, name: str
    ) -> None:
        self.rng, self.model, self.traffic = rng, model, traffic
        # Its own hosts: named apart from every other deployment's, or the judge would take a
        # replica of the candidate and one of the control for one host (as adapters on one
        # server are) and set both aside when one of them drifts.
        self.replica_names = np.array([f"{name}-r{r}" for r in range(REPLICAS)])
        self.drift = rng.normal(0, traffic.drift_sd, REPLICAS) if traffic.drift_sd else None
        self.factor = np.ones(REPLICAS)
        if slow:
            self.factor[0] = traffic.slow_replica

    def drifts(self, replica: np.ndarray) -> np.ndarray:
        """Each request's drift: an AR(1) per replica, stepped once per request it serves."""
        if self.drift is None:
            return np.zeros(len(replica))
        phi = math.exp(-1 / self.traffic.drift_memory)
        innovation = self.traffic.drift_sd * math.sqrt(1 - phi * phi)
        out = np.empty(len(replica))
        for r in range(REPLICAS):
            index = np.flatnonzero(replica == r)
            k = len(index)
            if not k:
                continue
            noise = self.rng.normal(0, innovation, k)
            powers = phi ** np.arange(1, k + 1)
            # x_i = phi^i x_0 + sum_j phi^(i-j) e_j, by a scaled cumulative sum.
            path = powers * (self.drift[r] + np.cumsum(noise / powers))
            out[index] = path
            self.drift[r] = path[-1]
        return out

    def serve(self, arrival: np.ndarray, rate: float, tenant: np.ndarray) -> dict[str, Any]:
        rng, model, n = self.rng, self.model, len(arrival)
        burst = _burst(arrival) if self.traffic.bursts else np.ones(n)
        concurrency = rng.poisson(in_flight(rate, model) * burst)
        per_replica = concurrency / REPLICAS
        replica = rng.integers(0, REPLICAS, n)
        slow = self.factor[replica] * np.exp(self.drifts(replica))
        prompt = np.clip(np.round(rng.lognormal(np.log(300), 1.0, n)), 1, 6000).astype(np.int64)
        # The gateway's estimate from the characters it was sent, off the model's count by the
        # text's own characters per token.
        estimate = np.maximum(np.round(prompt * rng.lognormal(0, ESTIMATE_SD, n)), 1)
        drawn = rng.lognormal(np.log(model.output_median), 0.8, n)
        output = np.clip(np.round(drawn), 1, MAX_TOKENS).astype(np.int64)
        finish = np.where(drawn >= MAX_TOKENS, "length", "stop").astype("<U16")
        stall = np.where(rng.random(n) < 0.03, rng.uniform(2, 5, n), 1.0)
        ttft = (5 + 3 * per_replica + 0.01 * prompt) * rng.lognormal(0, 0.35, n) * stall
        ttft *= model.ttft_factor * slow
        if model.ttft_tail_factor != 1.0 and n:
            # Above the 85th percentile of these requests every first token is slower: a
            # monotone change that moves p95 and p99 by the factor and leaves the median alone.
            ttft = np.where(ttft > np.percentile(ttft, 85), ttft * model.ttft_tail_factor, ttft)
        tpot = (1.5 + 0.3 * per_replica) * rng.lognormal(0, 0.12, n) * model.tpot_factor * slow
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
        refused = _refused(rng, arrival, tenant) if self.traffic.skew else fate > 0.99
        refused &= ~(error | left | timeout)
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
        gives = rng.random(n) < 0.02
        feedback = np.where(gives, np.where(rng.random(n) < 0.85, 1, -1), 0)
        return {
            "status": status,
            "finish": finish,
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "e2e_ms": e2e,
            "prompt_tokens": prompt,
            "prompt_estimate": estimate.astype(np.int64),
            "output_tokens": output,
            "tool": tool,
            "cost": cost,
            "ts": arrival,
            "replica": self.replica_names[replica],
            "feedback": feedback,
        }


def _burst(arrival: np.ndarray) -> np.ndarray:
    return np.where(arrival % 120 < 20, 3.0, 1.0)


def _refused(rng: np.random.Generator, arrival: np.ndarray, tenant: np.ndarray) -> np.ndarray:
    """The big tenant bursts past its budget for 30 s of every 3 minutes: most of its requests
    in a burst are refused by the gateway; the others' rarely are."""
    bursting = (tenant == 0) & (arrival % 180 < 30)
    return np.where(bursting, rng.random(len(arrival)) < 0.7, rng.random(len(arrival)) < 0.002)


# --- traffic: conversations, tenants, arms ---------------------------------------------------


@dataclass
class Clock:
    """Arrivals as conversations: each conversation's turns keep its arm (the gateway's session
    key), which makes requests of one arm arrive in correlated runs, as they do."""

    rng: np.random.Generator
    traffic: Traffic
    conversation: int = 0

    def arrivals(self, start: float, end: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Arrival times, conversation ids and tenants of the requests in [start, end)."""
        rate = RATE_PER_S
        if self.traffic.bursts:
            # Thinning: draw at the peak rate, keep each by the rate at its moment.
            peak = 3.0
            n = self.rng.poisson(rate * peak * (end - start))
            at = np.sort(self.rng.uniform(start, end, n))
            at = at[self.rng.random(n) < _burst(at) / peak]
        else:
            n = self.rng.poisson(rate * (end - start))
            at = np.sort(self.rng.uniform(start, end, n))
        # A new conversation with probability 1 / turns, else a recent one continues.
        new = self.rng.random(len(at)) < 1 / self.traffic.turns
        ids = self.conversation + np.cumsum(new)
        recent = np.maximum(ids - self.rng.integers(0, 20, len(at)), self.conversation + 1)
        conversation = np.where(new, ids, recent)
        self.conversation = int(ids[-1]) if len(ids) else self.conversation
        shares = (0.6, 0.3, 0.1) if self.traffic.skew else (1 / 3, 1 / 3, 1 / 3)
        tenant = self.rng.choice(3, len(at), p=shares)
        return at, conversation, tenant


def assign(conversation: np.ndarray, weights: dict[str, float], salt: str) -> np.ndarray:
    """The gateway's own arm choice on the gateway's own session key (a conversation's opening;
    the requests carry no `user`)."""
    route = Route(
        name="chat",
        salt=salt,
        arms=tuple(Arm(name=n, deployment_id=n, weight=w) for n, w in weights.items() if w),
    )
    arms = np.empty(len(conversation), dtype="<U8")
    chosen: dict[int, str] = {}
    for index, conv in enumerate(conversation.tolist()):
        if conv not in chosen:
            payload = {"messages": [{"role": "user", "content": f"conversation {conv}"}]}
            key = session_key(
                stickiness="user", payload=payload, session_header=None, request_id=""
            )
            chosen[conv] = choose_arm(route, f"tenant\0{key}").name
        arms[index] = chosen[conv]
    return arms


def replayed(columns: dict[str, Any], arm: str, step: int) -> dict[str, Any]:
    """The requests as gateway records, through the consumer's parser and the stored columns."""
    fields = frozenset(
        {"ts", "replica", "status", "finish", "pt", "pe", "ot", "ttft_ms", "tpot_ms", "e2e_ms"}
        | {"tool", "cost"}
    )
    rows = []
    for i in range(len(columns["status"])):
        record = {
            "ts": float(columns["ts"][i]),
            "rid": str(i),
            "route": "chat",
            "arm": arm,
            "replica": str(columns["replica"][i]),
            "status": int(columns["status"][i]),
            "finish": str(columns["finish"][i]) or None,
            "pt": int(columns["prompt_tokens"][i]),
            "pe": int(columns["prompt_estimate"][i]),
            "ot": int(columns["output_tokens"][i]),
            "ttft_ms": _none_if_nan(columns["ttft_ms"][i]),
            "tpot_ms": _none_if_nan(columns["tpot_ms"][i]),
            "e2e_ms": float(columns["e2e_ms"][i]),
            "tool": str(columns["tool"][i]) or None,
            "cost": float(columns["cost"][i]),
        }
        sample: Sample = sample_parse(orjson.dumps(record), required=fields, optional=frozenset())
        rows.append(
            {
                "status": sample.status,
                "finish": sample.finish,
                "ttft_ms": sample.ttft_ms,
                "tpot_ms": sample.tpot_ms,
                "e2e_ms": sample.e2e_ms,
                "prompt_tokens": sample.pt,
                "prompt_estimate": sample.pe,
                "output_tokens": sample.ot,
                "tool": sample.tool,
                "cost": sample.cost,
                "ts": sample.ts,
                "replica": sample.replica,
                "step": step,
            }
        )
    parsed = ArmSamples.from_rows(rows)
    return {name: getattr(parsed, name) for name in columns if name != "feedback"} | {
        "feedback": columns["feedback"]
    }


def _none_if_nan(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


# --- one rollout through the engine ----------------------------------------------------------


@dataclass
class ArmLog:
    """One arm's requests so far, a chunk at a time, and what the engine reads of them."""

    chunks: list[dict[str, Any]] = field(default_factory=list)
    _joined: dict[str, Any] | None = None

    def add(self, columns: dict[str, Any]) -> None:
        if len(columns["status"]):
            self.chunks.append(columns)
            self._joined = None

    def samples(self, *, until: float, steps: tuple[int, int]) -> ArmSamples:
        if not self.chunks:
            return ArmSamples.empty()
        if self._joined is None:
            self._joined = {
                name: np.concatenate([c[name] for c in self.chunks]) for name in self.chunks[0]
            }
        joined = self._joined
        keep = (joined["ts"] < until) & (joined["step"] >= steps[0]) & (joined["step"] <= steps[1])
        feedback = joined["feedback"][keep]
        # Built directly: the simulator writes only values the gateway writes (the replay
        # scenario's columns went through the checks on the way in).
        return ArmSamples(
            **{name: values[keep] for name, values in joined.items() if name != "feedback"},
            feedback_positive=int((feedback > 0).sum()),
            feedback_negative=int((feedback < 0).sum()),
        )


@dataclass
class Outcome:
    result: str  # promoted, rolled_back, held (paused and never settled), ended
    held: bool  # paused for a person at least once
    passed_a_step: bool  # the judge passed a step (every blocking metric within its pass margin)
    by: str  # what rolled it back: "guardrail: …" or "judge: <metric>"
    seconds: float
    held_for: tuple[str, ...] = ()  # the blocking metrics unresolved when it paused


def rollout(rng: np.random.Generator, scenario: Scenario, *, tick: float) -> Outcome:
    traffic = scenario.traffic
    clock = Clock(rng, traffic)
    deployments = {
        "baseline": Deployment(rng, BASE, traffic, slow=False, name="baseline"),
        "canary": Deployment(rng, scenario.candidate, traffic, slow=True, name="canary"),
        "control": Deployment(rng, BASE, traffic, slow=False, name="control"),
    }
    logs = {arm: ArmLog() for arm in deployments}
    salt = f"s{rng.integers(1 << 30)}"
    # A regression runs the default plan up to the end of its last step (`scenario.steps`).
    plan = DEFAULT_PLAN
    judged = [i for i, step in enumerate(plan.steps) if step.weight < 100]
    now, drawn_until = 0.0, 0.0
    step_index, step_started, resumed, held, passed = 0, 0.0, False, False, False
    scheduled_look_taken = False
    held_for: tuple[str, ...] = ()

    while True:
        now += tick
        while drawn_until < now:
            end = drawn_until + CHUNK_S
            _draw(rng, clock, deployments, logs, scenario, plan, step_index, salt, drawn_until, end)
            drawn_until = end
        state = TickState(
            plan=plan,
            gates=GATES,
            step_index=step_index,
            baked_s=now - step_started,
            resumed=resumed,
            judged=step_index in judged,
            scheduled_look_taken=scheduled_look_taken,
        )
        step_arms = {
            arm: log.samples(until=now, steps=(step_index, step_index)) for arm, log in logs.items()
        }
        window = (judged[0], step_index)

        def look(
            final: bool,
            scheduled: bool,
            window: tuple[int, int] = window,
            now: float = now,
            step: int = step_index,
        ) -> Report:
            control = logs["control"].samples(until=now, steps=window) if scenario.control else None
            return judge(
                logs["baseline"].samples(until=now, steps=window),
                logs["canary"].samples(until=now, steps=window),
                DEFAULT_POLICY,
                final=final,
                control=control if control is not None and len(control) else None,
                last_step=step == judged[-1],
                equal_share_steps=plan.equal_share_steps,
                scheduled=ScheduledLook(judged.index(step), len(judged)) if scheduled else None,
            )

        decision = decide_on(state, step_arms, look)
        if decision.action == "rollback":
            breached = [test.name for test in decision.guardrails if test.breached]
            failed = (
                [v.metric for v in decision.report.verdicts if v.outcome == "fail"]
                if decision.report is not None
                else []
            )
            by = f"guardrail: {breached[0]}" if breached else f"judge: {failed[0]}"
            return Outcome("rolled_back", held, passed, by, now, held_for)
        if decision.report is not None and decision.report.final:
            passed = passed or decision.report.decision == "promote"
            scheduled_look_taken = True
        if decision.action == "pause":
            held_for = held_for or _unresolved(decision.report)
            if resumed:
                return Outcome("held", True, passed, "", now, held_for)
            held, resumed = True, True
            continue
        if decision.action in ("advance", "promote"):
            if decision.action == "promote" or step_index + 1 >= scenario.steps:
                result = "promoted" if decision.action == "promote" else "ended"
                return Outcome(result, held, passed, "", now, held_for)
            step_index, step_started, resumed = step_index + 1, now, False
            scheduled_look_taken = False
            continue
        if resumed and now - step_started > RESUMED_LIMIT_S:
            return Outcome("held", True, passed, "", now, held_for)


def _unresolved(report: Report | None) -> tuple[str, ...]:
    if report is None:
        return ()
    blocking = {m.name for m in DEFAULT_POLICY.metrics if m.blocking}
    return tuple(
        v.metric for v in report.verdicts if v.outcome == "inconclusive" and v.metric in blocking
    )


def _draw(
    rng: np.random.Generator,
    clock: Clock,
    deployments: dict[str, Deployment],
    logs: dict[str, ArmLog],
    scenario: Scenario,
    plan: Any,
    step_index: int,
    salt: str,
    start: float,
    end: float,
) -> None:
    """The requests of [start, end), split over the arms by the step's weights (a chunk never
    spans a step change: the harness draws ahead by at most one chunk, and the engine reads by
    arrival time and step)."""
    weight = plan.steps[step_index].weight
    control = weight if scenario.control and weight < 100 else 0.0
    weights = {"baseline": max(100 - weight - control, 0.0), "canary": weight, "control": control}
    at, conversation, tenant = clock.arrivals(start, end)
    arms = assign(conversation, weights, salt)
    for arm, deployment in deployments.items():
        mine = arms == arm
        if not mine.any():
            continue
        rate = RATE_PER_S * weights[arm] / 100
        columns = deployment.serve(at[mine], rate, tenant[mine])
        columns["step"] = np.full(int(mine.sum()), step_index, dtype=np.int64)
        if scenario.replay:
            columns = replayed(columns, arm, step_index)
        logs[arm].add(columns)


# --- the table -------------------------------------------------------------------------------


def run_scenario(args: tuple[str, int, float, int, str | None]) -> dict[str, Any]:
    key, rollouts, tick, seed, log = args
    scenario = SCENARIOS[key]
    # Seeded by the scenario's name, so adding a scenario leaves the others' draws alone.
    rng = np.random.default_rng([seed, *key.encode()])
    started = time.perf_counter()
    outcomes = []
    for index in range(rollouts):
        outcomes.append(rollout(rng, scenario, tick=tick))
        if log:
            # One line a rollout as it ends: a long row can be read before it is done.
            with open(f"{log}.{key}.jsonl", "a") as lines:
                lines.write(json.dumps({"rollout": index, **asdict(outcomes[-1])}) + "\n")
    rolled_back = [o for o in outcomes if o.result == "rolled_back"]
    return {
        "key": key,
        "scenario": scenario.name,
        "target": scenario.target,
        "rollouts": rollouts,
        "rolled_back": len(rolled_back),
        "held": sum(o.held for o in outcomes),
        "passed_a_step": sum(o.passed_a_step for o in outcomes),
        "promoted": sum(o.result == "promoted" for o in outcomes),
        "by": dict(Counter(o.by for o in rolled_back).most_common(4)),
        "held_for": dict(Counter(m for o in outcomes for m in o.held_for).most_common(4)),
        "median_s_to_rollback": statistics.median(o.seconds for o in rolled_back)
        if rolled_back
        else None,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def upper_95(k: int, n: int) -> float:
    """The exact (Clopper-Pearson) one-sided 95% upper bound of a share seen k times in n."""
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(0.95, k + 1, n - k))


def verdict(result: dict[str, Any]) -> str:
    n = result["rollouts"]
    rolled, held = result["rolled_back"], result["held"]
    target = result["target"]
    if target == AA:
        ok = upper_95(rolled, n) <= 0.015 and held / n <= 0.02
        return "ok" if ok else "NO"
    if target == "catch":
        return "ok" if rolled / n >= 0.90 else "NO"
    if target == "no rollback":
        return "ok" if rolled / n <= 0.05 else "NO"
    return "ok" if result["passed_a_step"] / n <= 0.05 else "NO"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=500)
    parser.add_argument("--tick", type=float, default=10.0, help="seconds between ticks")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated keys")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--log", metavar="PREFIX", help="append each rollout's outcome to PREFIX.<scenario>.jsonl"
    )
    args = parser.parse_args()
    keys = [k.strip() for k in args.scenarios.split(",") if k.strip()]
    unknown = [k for k in keys if k not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {list(SCENARIOS)}")
    if args.rollouts < 1 or not 0 < args.tick <= 300:
        parser.error("--rollouts must be at least 1 and --tick in (0, 300]")
    jobs = [(k, args.rollouts, args.tick, args.seed, args.log) for k in keys]
    if not args.json:
        print(
            f"{args.rollouts} rollouts per scenario through orchestration.engine.decide_on, "
            f"{RATE_PER_S:g} requests/s, the default plan, a tick every {args.tick:g} s; alpha "
            f"{DEFAULT_POLICY.alpha} per rollout ({DEFAULT_POLICY.guardrail_share:.0%} to the "
            f"guardrails), pass_alpha {DEFAULT_POLICY.pass_alpha}\n"
        )
        print(
            f"{'scenario':<42} {'rolled back':>12} {'(95% up)':>9} {'held':>6} {'passed':>7} "
            f"{'target':>14}  by, held for",
            flush=True,
        )
    results = []
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        # Each scenario's row as soon as it is done (they take from seconds to many minutes).
        for result in pool.map(run_scenario, jobs):
            results.append(result)
            if not args.json:
                print(row(result), flush=True)
    if args.json:
        print(json.dumps({"tick_s": args.tick, "results": results}))


def row(r: dict[str, Any]) -> str:
    n = r["rollouts"]
    return (
        f"{r['scenario']:<42} {r['rolled_back'] / n:>12.1%} "
        f"{upper_95(r['rolled_back'], n):>9.1%} {r['held'] / n:>6.1%} "
        f"{r['passed_a_step'] / n:>7.1%} {r['target'] + ' ' + verdict(r):>14}  {r['by'] or ''} "
        f"{r['held_for'] or ''}"
    )


if __name__ == "__main__":
    main()
