"""How long `make demo`'s canary takes, from a fresh database to the candidate's promotion.

    .venv/bin/python bench/demo_rollout.py [--runs 2] [--timeout 900]

Each run does what `make demo` does, on a stack of its own: an empty database
(`tollgate_bench_demo`, dropped before; the last run's is left to read), Redis database 11
(flushed before), free ports for the web server, the gateway, Prometheus and the nine simfleet
replicas (three each for the baseline, the candidate and the control), and a var
directory under var/bench/demo, so it runs beside a developer's stack and leaves it alone. It
brings the stack up (`deploy/stack.py up`), seeds the demo data, starts the demo canary
(`manage.py demo_canary`: the "demo" plan, whose steps ask only the default 200 samples at 50%,
so the judge says how many it needs) and the demo's traffic (20 requests/s), then reads the
rollout's events from the database as they are written, until the rollout settles. It prints
each event's time since the rollout started, with the candidate's samples, every 30 s what the
judge's latest look left unsettled, and then each figure's minimum, median and maximum over the
runs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
import redis

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
VAR = ROOT / "var" / "bench" / "demo"
DATABASE = "tollgate_bench_demo"
SERVER = "postgres://postgres@127.0.0.1:5432"
REDIS_URL = "redis://127.0.0.1:6379/11"  # the tests take 15, the other benches 12-14
SETTLED = ("promoted", "rolled_back", "paused", "aborted", "failed")
# How often a run prints what the judge is still waiting on.
TRAIL_S = 30.0


@dataclass(frozen=True)
class Event:
    at_s: float  # since the rollout was created
    to_state: str
    step: int
    candidate_samples: int | None
    reason: str


def free_ports(count: int) -> int:
    """A port that is free with the `count - 1` after it."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + count > 65535:
            continue
        sockets = [socket.socket() for _ in range(count)]
        try:
            for offset, sock in enumerate(sockets):
                sock.bind(("127.0.0.1", base + offset))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise SystemExit("no run of free ports found")


def environment() -> dict[str, str]:
    web, gateway, metrics, prometheus = (free_ports(1) for _ in range(4))
    return {
        **os.environ,
        "DATABASE_URL": f"{SERVER}/{DATABASE}",
        "REDIS_URL": REDIS_URL,
        "TOLLGATE_VAR_DIR": str(VAR),
        "WEB_PORT": str(web),
        "GATEWAY_PORT": str(gateway),
        "GATEWAY_METRICS_PORT": str(metrics),
        "PROMETHEUS_URL": f"http://127.0.0.1:{prometheus}",
        "SIMFLEET_BASE_PORT": str(free_ports(9)),  # three replicas a fleet (rollouts.seed)
    }


def drop_database() -> None:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


def run(argv: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


@contextmanager
def demo_stack(env: dict[str, str]) -> Iterator[None]:
    drop_database()
    redis.Redis.from_url(REDIS_URL).flushdb()
    shutil.rmtree(VAR, ignore_errors=True)
    try:
        run([sys.executable, "deploy/stack.py", "up"], env)
        yield
    finally:
        subprocess.run(
            [sys.executable, "deploy/stack.py", "down"], cwd=ROOT, env=env, capture_output=True
        )


def events_of(rollout_id: int) -> tuple[str, list[Event]]:
    with psycopg.connect(f"{SERVER}/{DATABASE}") as db:
        state, created = db.execute(
            "SELECT state, created_at FROM rollouts_rollout WHERE id = %s", (rollout_id,)
        ).fetchone() or ("", None)
        rows = db.execute(
            "SELECT created_at, to_state, step_index, evidence -> 'canary' ->> 'samples', reason "
            "FROM rollouts_rolloutevent WHERE rollout_id = %s ORDER BY id",
            (rollout_id,),
        ).fetchall()
    assert isinstance(created, datetime)
    return str(state), [
        Event((at - created).total_seconds(), to, step, int(n) if n else None, reason)
        for at, to, step, n, reason in rows
    ]


def unsettled(rollout_id: int) -> str:
    """What the judge's latest look at the rollout has not settled: each inconclusive metric with
    the candidate's samples, its difference, and how far its pass bound stands from the margin."""
    with psycopg.connect(f"{SERVER}/{DATABASE}") as db:
        row = db.execute(
            "SELECT report FROM evaluation_verdict WHERE rollout_id = %s "
            "ORDER BY looked_at DESC, id DESC LIMIT 1",
            (rollout_id,),
        ).fetchone()
    if row is None:
        return ""
    nan = float("nan")
    return "; ".join(
        f"{v['metric']} n={v['n_candidate']} vs {v['reference']} {v['difference'] or 0:+.3f} "
        f"bound {v['pass_bound'] or nan:+.3f} vs {v['pass_threshold'] or nan:+.3f}"
        for v in row[0]["verdicts"]
        if v["outcome"] == "inconclusive" and v["n_candidate"]
    )


def one_run(number: int, timeout_s: float) -> list[Event]:
    env = environment()
    with demo_stack(env):
        run([str(PYTHON), "manage.py", "seed_demo"], env)
        started = run([str(PYTHON), "manage.py", "demo_canary"], env)
        found = re.search(r"rollout (\d+)", started)
        if found is None:
            raise SystemExit(f"demo_canary named no rollout: {started}")
        rollout_id = int(found.group(1))
        run([sys.executable, "deploy/stack.py", "traffic"], env)
        deadline = time.monotonic() + timeout_s
        shown, trail_at = 0, time.monotonic() + TRAIL_S
        while True:
            state, events = events_of(rollout_id)
            for event in events[shown:]:
                samples = "" if event.candidate_samples is None else f"{event.candidate_samples:>6}"
                print(
                    f"run {number}  {clock(event.at_s)}  step {event.step + 1}  "
                    f"{event.to_state:<12} {samples:>6}  {event.reason[:110]}",
                    flush=True,
                )
            shown = len(events)
            if state in SETTLED or time.monotonic() > deadline:
                return events
            if time.monotonic() > trail_at:
                trail_at += TRAIL_S
                print(f"run {number}  waiting on: {unsettled(rollout_id) or '-'}", flush=True)
            time.sleep(1)


def clock(seconds: float) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}:{rest:04.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a run may take")
    args = parser.parse_args()
    if not PYTHON.exists():
        raise SystemExit("no .venv here: run 'make venv' first")
    print("run  since start  step  to state     samples  reason", flush=True)
    outcomes = [one_run(number, args.timeout) for number in range(1, args.runs + 1)]
    figures: dict[str, list[float]] = {}
    for events in outcomes:
        for event in events:
            if event.to_state == "running" and event.step > 0:
                figures.setdefault(f"step {event.step} passed (s)", []).append(event.at_s)
            if event.to_state in SETTLED:
                figures.setdefault(f"{event.to_state} (s)", []).append(event.at_s)
    print("\nfigure                      runs     min  median     max")
    for name, values in sorted(figures.items()):
        print(
            f"{name:<26} {len(values):>5} {min(values):>7.1f} {statistics.median(values):>7.1f}"
            f" {max(values):>7.1f}"
        )


if __name__ == "__main__":
    main()
