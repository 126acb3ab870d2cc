"""The relay bench's figures: a measured run, the rows of the table, the ratios to nginx and the
goals (bench/relay.py runs the bench and prints these)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from overhead_phases import percentile

OTHERS_LIMIT = 0.3  # cores other work may use in a window before it is marked disturbed
# The load at which the client counts as saturated (client_load). Not from the cores' idle time:
# niced work on a shared machine soaks that up without slowing the bench.
SATURATED = 0.9

# The goals (ms, streams/s), from the issue.
GOAL_CPU_BURST_MS = 0.15
GOAL_CPU_PACED_MS = 0.6
GOAL_CAPACITY = 5000.0
GOAL_ADDED_TTFT_MS = (1.0, 3.0)  # p50, p99, at 50 and 200 paced streams


@dataclass
class Run:
    target: str
    completed: int
    window_s: float
    errors: int
    error_examples: list[str]
    ttft_ms: list[float]
    total_ms: list[float]
    cpu_s: dict[str, float]  # over the window: proxy, redis, upstream, loadgen
    others: float  # cores used by everything else on the machine meanwhile, less niced work
    niced: float  # cores used by niced work (which yields to the bench's processes)
    client_load: float  # of the client's core (pinned) or of the machine (unpinned), 0-1

    @property
    def rate(self) -> float:
        return self.completed / self.window_s

    def cores(self, *names: str) -> float:
        return sum(self.cpu_s.get(name, 0.0) for name in names) / self.window_s


# --- figures -------------------------------------------------------------------------------------


Pair = tuple[float, float]  # p50, p99 in ms


def p50_p99(values: Sequence[float]) -> Pair:
    return percentile(values, 0.5), percentile(values, 0.99)


def minus(a: Pair, b: Pair) -> Pair:
    return a[0] - b[0], a[1] - b[1]


@dataclass
class Row:
    layout: str
    mode: str
    concurrency: int
    target: str
    streams_per_s: float
    errors: int
    ttft: Pair
    total: Pair
    added_ttft: Pair  # direct's row: how far its two runs differ (absolute), the noise floor
    added_total: Pair
    client_cores: float  # load generator and stub
    client_load: float  # of their core (pinned) or of the machine (unpinned), 0-1
    others: float
    cpu_ms: float | None = None  # the proxy's CPU per stream
    redis_ms: float | None = None
    capacity: float | None = None  # streams/s at one full core, from cpu_ms
    cpu_vs_nginx: float | None = None
    ttft_vs_nginx: Pair | None = None  # added TTFT minus nginx's added TTFT
    error_examples: list[str] = dataclasses.field(default_factory=list)


def per_stream_ms(run: Run, name: str) -> float | None:
    if name not in run.cpu_s or not run.completed:
        return None
    return run.cpu_s[name] / run.completed * 1000


def summarize(where: tuple[str, str, int], runs: list[Run]) -> list[Row]:
    """One row per target; direct's two runs pooled into one row, the reference of the others."""
    layout, mode, concurrency = where
    directs = [run for run in runs if run.target == "direct"]
    pooled = ([v for r in directs for v in r.ttft_ms], [v for r in directs for v in r.total_ms])
    base = p50_p99(pooled[0]), p50_p99(pooled[1])
    first, last = directs[0], directs[-1]
    noise = (
        tuple(abs(x) for x in minus(p50_p99(last.ttft_ms), p50_p99(first.ttft_ms))),
        tuple(abs(x) for x in minus(p50_p99(last.total_ms), p50_p99(first.total_ms))),
    )
    rows = [
        Row(
            layout,
            mode,
            concurrency,
            "direct",
            streams_per_s=sum(r.rate for r in directs) / len(directs),
            errors=sum(r.errors for r in directs),
            ttft=base[0],
            total=base[1],
            added_ttft=(noise[0][0], noise[0][1]),
            added_total=(noise[1][0], noise[1][1]),
            client_cores=max(r.cores("loadgen", "upstream") for r in directs),
            client_load=max(r.client_load for r in directs),
            others=max(r.others for r in directs),
            error_examples=[e for r in directs for e in r.error_examples][:3],
        )
    ]
    for run in runs:
        if run.target == "direct":
            continue
        ttft, total = p50_p99(run.ttft_ms), p50_p99(run.total_ms)
        cpu_ms = per_stream_ms(run, "proxy")
        rows.append(
            Row(
                layout,
                mode,
                concurrency,
                run.target,
                streams_per_s=run.rate,
                errors=run.errors,
                ttft=ttft,
                total=total,
                added_ttft=minus(ttft, base[0]),
                added_total=minus(total, base[1]),
                client_cores=run.cores("loadgen", "upstream"),
                client_load=run.client_load,
                others=run.others,
                cpu_ms=cpu_ms,
                redis_ms=per_stream_ms(run, "redis"),
                capacity=1000 / cpu_ms if cpu_ms else None,
                error_examples=run.error_examples[:3],
            )
        )
    compare_to_nginx(rows)
    return rows


def compare_to_nginx(rows: list[Row]) -> None:
    nginx = next((row for row in rows if row.target == "nginx"), None)
    if nginx is None or not nginx.cpu_ms:
        return
    for row in rows:
        if row.cpu_ms is not None and row.target != "nginx":
            row.cpu_vs_nginx = row.cpu_ms / nginx.cpu_ms
            row.ttft_vs_nginx = minus(row.added_ttft, nginx.added_ttft)


def run_line(where: tuple[str, str, int], label: str, run: Run) -> str:
    ttft, total = p50_p99(run.ttft_ms), p50_p99(run.total_ms)
    cpu = per_stream_ms(run, "proxy")
    redis_ms = per_stream_ms(run, "redis")
    parts = [
        f"[{where[0]} {where[1]} {where[2]}] {label}: {run.rate:,.0f} streams/s",
        f"proxy {cpu:.3f} ms/stream ({run.cores('proxy'):.2f} cores)" if cpu is not None else "",
        f"redis {redis_ms:.3f} ms/stream" if redis_ms is not None else "",
        f"TTFT p50/p99 {ttft[0]:.2f}/{ttft[1]:.2f} ms, total {total[0]:.2f}/{total[1]:.2f} ms",
        f"errors {run.errors}" + (f" ({'; '.join(run.error_examples[:2])})" if run.errors else ""),
        f"loadgen {run.cores('loadgen'):.2f} + stub {run.cores('upstream'):.2f} cores "
        f"(client {run.client_load:.0%} busy)",
        f"others {run.others:.2f} (niced {run.niced:.2f})",
    ]
    return ", ".join(part for part in parts if part)


# --- the table and the goals ---------------------------------------------------------------------


def num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def pair(value: Pair | None, sign: str = "") -> str:
    if value is None:
        return "-"
    if sign == "±":
        return f"±{value[0]:.2f} / ±{value[1]:.2f}"
    return f"{value[0]:+.2f} / {value[1]:+.2f}" if sign else f"{value[0]:.2f} / {value[1]:.2f}"


HEADER = (
    "| layout | mode | N | target | streams/s | proxy CPU ms/stream | Redis ms/stream "
    "| capacity/s at 1 core | TTFT p50 / p99 ms | total p50 / p99 ms | added TTFT p50 / p99 "
    "| added total p50 / p99 | CPU x nginx | added TTFT - nginx's | errors | client cores |"
)


def table_row(row: Row) -> str:
    direct = row.target == "direct"
    saturated = row.client_load >= SATURATED
    marks = ("~" if row.others > OTHERS_LIMIT else "") + ("!" if saturated else "")
    cells = [
        row.layout,
        row.mode,
        str(row.concurrency),
        row.target + marks,
        num(row.streams_per_s, 0),
        num(row.cpu_ms, 3),
        num(row.redis_ms, 3),
        num(row.capacity, 0),
        pair(row.ttft),
        pair(row.total),
        pair(row.added_ttft, "±" if direct else "+"),
        pair(row.added_total, "±" if direct else "+"),
        num(row.cpu_vs_nginx),
        pair(row.ttft_vs_nginx, "+"),
        str(row.errors),
        num(row.client_cores),
    ]
    return "| " + " | ".join(cells) + " |"


def print_table(rows: list[Row]) -> None:
    print(HEADER)
    print("|" + "---|" * HEADER.count(" |"))
    for row in rows:
        print(table_row(row))
    print(
        "\nms; streams/s and CPU over the measured window. added = target - direct (both direct "
        "runs pooled); direct's added columns: how far its two runs differ (noise floor). "
        "capacity = 1 / proxy CPU per stream (Redis not included). client cores = load "
        f"generator + stub. ~ other work used > {OTHERS_LIMIT} cores (niced work left out); "
        f"! the client was >= {SATURATED:.0%} busy (its core when pinned, the machine when not, "
        "or the load generator's one process): the throughput is that limit, not the proxy's."
    )


def goal_rows(rows: list[Row], mode: str, concurrencies: Sequence[int] = ()) -> list[Row]:
    """Tollgate's rows the goals are judged on: pinned where measured (a core of its own)."""
    mine = [r for r in rows if r.target == "tollgate" and r.mode == mode]
    if concurrencies:
        mine = [r for r in mine if r.concurrency in concurrencies]
    pinned = [r for r in mine if r.layout == "pinned"]
    return pinned or mine


def verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "not met")


def goals(rows: list[Row]) -> list[dict[str, Any]]:
    """Each goal: met or not on the worst of its rows, with the figures it was judged on."""
    out: list[dict[str, Any]] = []

    def judge(
        name: str, chosen: list[Row], value: Callable[[Row], str], ok: Callable[[Row], bool]
    ) -> None:
        figures = [f"{r.layout} {r.concurrency}: {value(r)}" for r in chosen]
        passed = all(ok(r) for r in chosen) if chosen else None
        out.append({"goal": name, "result": verdict(passed), "figures": figures})

    def cpu(r: Row) -> str:
        return f"{num(r.cpu_ms, 3)} ms (+ Redis {num(r.redis_ms, 3)})"

    burst, paced = goal_rows(rows, "burst"), goal_rows(rows, "paced")
    judge(
        f"Tollgate CPU per stream, burst <= {GOAL_CPU_BURST_MS} ms",
        burst,
        cpu,
        lambda r: r.cpu_ms is not None and r.cpu_ms <= GOAL_CPU_BURST_MS,
    )
    judge(
        f"Tollgate CPU per stream, paced <= {GOAL_CPU_PACED_MS} ms",
        paced,
        cpu,
        lambda r: r.cpu_ms is not None and r.cpu_ms <= GOAL_CPU_PACED_MS,
    )
    judge(
        f"Tollgate burst capacity at one core >= {GOAL_CAPACITY:,.0f} streams/s",
        burst,
        lambda r: f"{num(r.capacity, 0)}/s",
        lambda r: r.capacity is not None and r.capacity >= GOAL_CAPACITY,
    )
    p50, p99 = GOAL_ADDED_TTFT_MS
    judge(
        f"Tollgate added TTFT p50/p99 <= +{p50:g}/+{p99:g} ms at 50 and 200 paced streams",
        goal_rows(rows, "paced", (50, 200)),
        lambda r: pair(r.added_ttft, "+") + " ms",
        lambda r: r.added_ttft[0] <= p50 and r.added_ttft[1] <= p99,
    )
    return out


def print_goals(results: list[dict[str, Any]]) -> None:
    print()
    for goal in results:
        print(f"- {goal['goal']}: **{goal['result']}** ({'; '.join(goal['figures']) or '-'})")
