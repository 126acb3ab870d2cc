"""The gateway overhead bench's report: the tables, the JSON summary and the target ratios."""

from __future__ import annotations

import dataclasses
from typing import Any

from overhead_phases import Level, Sweep, fmt, reference
from overhead_setup import CAPACITY_MS


def report_concurrency(conc: dict[int, Level], probe_rate: float) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for level, runs in conc.items():
        base = reference(runs)
        events = runs["direct"][0].stream_events_per_s
        print(
            f"\n{level} concurrent streams held open (~{events:,.0f} token events/s), probes "
            f"{probe_rate:g}/s; ms; + is added over both direct runs pooled; ~ marks a disturbed "
            "run"
        )
        print(
            f"{'target':<14}{'RT p50':>8}{'p99':>8}{'+p50':>8}{'+p99':>8}{'TTFT p50':>10}"
            f"{'p99':>8}{'+p50':>8}{'+p99':>8}{'open':>6}{'err':>5}  cpu (cores)"
        )
        for name, (outcome, figures) in runs.items():
            added = figures.minus(base)
            cpu = " ".join(f"{k}={v:.2f}" for k, v in outcome.cpu.items())
            errors = outcome.errors + outcome.stream_errors
            mark = "~" if outcome.disturbed else ""
            cells = (*figures.rt, *added.rt)
            cells_ttft = (*figures.ttft, *added.ttft)
            print(
                f"{name + mark:<14}"
                + "".join(f"{fmt(v):>8}" for v in cells)
                + f"{fmt(cells_ttft[0]):>10}"
                + "".join(f"{fmt(v):>8}" for v in cells_ttft[1:])
                + f"{outcome.streams_min_open:>6}{errors:>5}  {cpu}"
                + f" others={outcome.other_cores:.2f} steal={outcome.steal_cores:.2f}"
            )
            summary.setdefault(str(level), {})[name] = {
                "rt_ms": figures.rt,
                "ttft_ms": figures.ttft,
                "added_rt_ms": added.rt,
                "added_ttft_ms": added.ttft,
                "samples": [len(outcome.rt_ms), len(outcome.ttft_ms)],
                "errors": errors,
                "cpu": outcome.cpu,
                "others": round(outcome.other_cores, 2),
                "steal": round(outcome.steal_cores, 2),
            }
    return summary


def report_sweep(sweeps: dict[str, Sweep], limit_ms: float) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    print(
        f"\nsustained rate: open-loop Poisson arrivals of the short requests, half streaming; "
        f"sustained = no error and p99 added <= {limit_ms:g} ms, capacity = answered in full "
        f"with p99 added < {CAPACITY_MS:g} ms"
    )
    print(f"{'target':<10}{'sustained':>10}{'capacity':>10}")
    for name, sweep in sweeps.items():
        cpu = " ".join(f"{k}={v:.2f}" for k, v in sweep.cpu.items())
        print(f"{name:<10}{sweep.sustained:>8g}/s{sweep.capacity:>8g}/s  cpu at sustained: {cpu}")
        print(f"{'':<12}p99 limit: {sweep.strict_end}")
        if sweep.capacity_end and sweep.capacity_end != sweep.strict_end:
            print(f"{'':<12}capacity: {sweep.capacity_end}")
        summary[name] = dataclasses.asdict(sweep)
    return summary


def ratios(conc: dict[int, Level], sweeps: dict[str, Sweep]) -> None:
    print()
    top = max(conc)
    added = conc[top]["tollgate"][1].minus(reference(conc[top]))
    print(
        f"Tollgate added p99 at {top} streams: round trip {fmt(added.rt[1])} ms, TTFT "
        f"{fmt(added.ttft[1])} ms (target <= 5 ms): {met(added.worst_p99 <= 5)}"
    )
    tollgate, litellm, nginx = (sweeps[n].sustained for n in ("tollgate", "litellm", "nginx"))
    if litellm > 0:
        print(
            f"Tollgate rate / LiteLLM rate: {tollgate:g} / {litellm:g} = "
            f"{tollgate / litellm:.1f} (target >= 3): {met(tollgate >= 3 * litellm)}"
        )
    else:
        print(
            f"Tollgate rate / LiteLLM rate: LiteLLM sustains none of the rates tried within "
            f"the p99 limit; Tollgate {tollgate:g}/s (target >= 3): {met(tollgate > 0)}"
        )
    capacity = sweeps["tollgate"].capacity, sweeps["litellm"].capacity
    if capacity[1] > 0:
        print(
            f"  by capacity instead: {capacity[0]:g} / {capacity[1]:g} = "
            f"{capacity[0] / capacity[1]:.1f}"
        )
    if tollgate > 0:
        bound = " (nginx's is a lower bound)" if "at least" in sweeps["nginx"].strict_end else ""
        print(
            f"nginx rate / Tollgate rate: {nginx:g} / {tollgate:g} = {nginx / tollgate:.1f}"
            f"{bound} (target <= 3): {met(nginx <= 3 * tollgate)}"
        )
    else:
        print("nginx rate / Tollgate rate: Tollgate sustains none of the rates tried: NOT met")


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"
