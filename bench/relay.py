"""What relaying a stream costs Tollgate's gateway, next to a direct call, nginx and LiteLLM.

    .venv/bin/python bench/relay.py [--window 15] [--warmup 2] [--concurrency 50,200]
        [--modes burst,paced] [--layouts pinned,unpinned]
        [--targets direct,nginx,tollgate,litellm] [--json FILE]

One run measures every target under the same load and prints one Markdown table, then whether
each of the relay's goals is met (progress on stderr). With the defaults that is 32 windows, about
11 minutes on two cores; --window 8 takes about 6. The processes, each its own:

  upstream  bench/relay_upstream.py, a stub that answers every chat completion with 32 content
            events, a finish event, a usage event and [DONE] (chunked SSE, keep-alive), either all
            at once (burst) or paced like a GPU (first token after 20 ms, then one every 20 ms)
  loadgen   bench/relay_load.py, N closed-loop clients (N = 50 and 200), each on its own
            keep-alive connection streaming one completion after another
  direct    no proxy: the load generator talks to the stub (the reference)
  nginx     the Debian package as a plain reverse proxy: one worker, proxy_buffering off,
            keepalive to the upstream (overhead_setup.nginx_conf)
  tollgate  `python -m gateway`, one worker, with a private redis-server, and a tenant whose
            budget sets every limit (never reached), so that every request runs the whole
            admission and settlement in Redis
  litellm   `litellm --num_workers 1`, only when var/bench/litellm-venv exists (made by
            bench/gateway_overhead.py; this script never installs it)

Burst measures the relay's CPU cost: nothing waits, so the proxy runs flat out and its CPU time
per stream (from /proc, the process and its children, over the measured window) is the cost of
one whole stream: accept the request, admit it, call upstream, relay 35 events, settle. Capacity
at one core is its inverse. Paced measures the latency a proxy adds when the upstream sets the
pace, as a GPU does: TTFT and total time, and the same minus direct's. Tollgate's Redis is
reported on its own (CPU per stream), not counted in the proxy's figure.

"Added" figures are the target's percentile minus direct's in the same layout, mode and
concurrency, with direct's samples pooled from two runs, one before and one after the proxies
(their difference, shown as ± on direct's row, is the noise floor). A stream counts when it ends
inside the window; one that is not a 200 with 32 content events and [DONE] is an error.

Layouts. pinned: the load generator and the stub share one core, the proxy under test (and
Tollgate's Redis) another (`taskset`, overhead_targets.cpu_layout), so a proxy gets a whole core
and the client's own cost is in direct's figures too. unpinned: no taskset at all, everything
competes for every core, as on a shared machine. The stack is started afresh for every layout and
mode. The goals are judged on the pinned rows when they were measured.

A shared machine. The bench's processes run at nice -10 as root (--nice), their autogroups too
(each process in a session of its own is in an autogroup of its own, and groups share the CPU by
the group's nice, not the process's). Before each run the bench waits (--patience, 5 s at most)
until other work uses at most 0.3 cores, not counting niced work (nice > 0, which yields to the
bench); a run during which it used more is run once more (--no-retry: not) and the quieter of the
two kept, marked ~ in the table when still disturbed. When the client was >= 90% busy (its core
when pinned, with interrupt and steal time; the machine when not; or the load generator's one
process) the throughput is the client's limit, not the proxy's: marked !. Direct in burst always
is, and a proxy can even beat it there: nginx passes a burst on as one HTTP chunk where the stub
sends one per event, which costs the load generator less to parse. So in burst compare the CPU per
stream; streams/s and the added latencies compare only loosely.

Needs nginx (installed with apt-get when run as root) and redis-server.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
from overhead_phases import progress
from overhead_setup import (
    FAST_MODEL,
    LITELLM_VENV,
    ROOT,
    TENANT_KEY,
    ensure_nginx,
    gateway_env,
    litellm_yaml,
    publish_snapshot,
    snapshot,
)
from overhead_targets import (
    Processes,
    Target,
    cpu_layout,
    cpu_seconds,
    free_port,
    http,
    machine_cpu_seconds,
    redis_server,
    start_nginx_proxy,
)
from relay_load import TOKEN, TOKENS
from relay_report import (
    OTHERS_LIMIT,
    Row,
    Run,
    goals,
    print_goals,
    print_table,
    run_line,
    summarize,
)

BENCH = Path(__file__).resolve().parent
# litellm_yaml names this model, so every target serves it (the stub echoes any model asked).
MODEL = FAST_MODEL
TARGETS = ("direct", "nginx", "tollgate", "litellm")
SETTLE_S = 0.5  # between runs, and the sample of the machine's load before each


# --- the stack: stub upstream and proxies ---------------------------------------------------------


@dataclass
class Stack:
    procs: Processes
    upstream_port: int
    targets: list[Target]

    def pid(self, name: str) -> int:
        return self.procs.started[name].pid


def start_stub(procs: Processes, mode: str) -> int:
    port = free_port()
    argv = [sys.executable, str(BENCH / "relay_upstream.py"), "--port", str(port), "--mode", mode]
    procs.start("upstream", argv, cpus="upstream")
    procs.wait_until(
        "upstream", lambda: http("GET", f"http://127.0.0.1:{port}/health")[0] == 200, 30
    )
    return port


def start_tollgate(procs: Processes, redis_url: str, upstream: str) -> Target:
    """The gateway with the bench tenant's snapshot in its Redis, once it has applied it."""
    port, metrics_port = free_port(), free_port()
    snap = snapshot(upstream, models=(MODEL,))
    publish_snapshot(redis_url, snap)
    env = gateway_env(redis_url, port, metrics_port)
    procs.start("tollgate", [sys.executable, "-m", "gateway"], cpus="proxy", env=env)

    def applied() -> bool:
        status, body = http("GET", f"http://127.0.0.1:{port}/readyz")
        return status == 200 and orjson.loads(body).get("snapshot_version") == snap.version

    procs.wait_until("tollgate", applied, 30)
    base = f"http://127.0.0.1:{port}"
    return Target("tollgate", base, {"authorization": f"Bearer {TENANT_KEY}"})


def start_nginx(procs: Processes, nginx: str, upstream_port: int) -> Target:
    port = free_port()
    start_nginx_proxy(procs, nginx, port, upstream_port)
    return Target("nginx", f"http://127.0.0.1:{port}", {})


def start_litellm(procs: Processes, litellm: Path, upstream: str) -> Target:
    port, master = free_port(), "sk-" + secrets.token_hex(16)
    config = procs.home / "litellm.yaml"
    config.write_text(litellm_yaml(upstream))
    env = {
        **os.environ,
        "LITELLM_MASTER_KEY": master,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
    }
    argv = [
        str(litellm),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    procs.start("litellm", argv, cpus="proxy", env=env)
    url = f"http://127.0.0.1:{port}/health/liveliness"
    procs.wait_until("litellm", lambda: http("GET", url)[0] == 200, 90)
    return Target("litellm", f"http://127.0.0.1:{port}", {"authorization": f"Bearer {master}"})


def start_stack(
    procs: Processes,
    mode: str,
    names: Sequence[str],
    redis_url: str | None,
    nginx: str | None,
    litellm: Path | None,
) -> Stack:
    port = start_stub(procs, mode)
    upstream = f"http://127.0.0.1:{port}"
    targets = [Target("direct", upstream, {})]
    for name in names:
        if name == "nginx" and nginx is not None:
            targets.append(start_nginx(procs, nginx, port))
        elif name == "tollgate" and redis_url is not None:
            targets.append(start_tollgate(procs, redis_url, upstream))
        elif name == "litellm" and litellm is not None:
            targets.append(start_litellm(procs, litellm, upstream))
    for target in targets:
        target.process = procs.started.get(target.name)
        check_stream(procs, target)
    for process in procs.started.values():
        renice_group(process.pid, procs.nice)
    return Stack(procs, port, targets)


def renice_group(pid: int, nice: int) -> None:
    """Gives the process's autogroup the bench's priority.

    Each process started in a session of its own (Processes.start, the load generator) is in an
    autogroup of its own where the kernel has them (sched_autogroup_enabled), and the scheduler
    shares the CPU between groups by the group's nice value, not the processes': a process's nice
    alone would not keep other sessions' work off the bench's cores.
    """
    group = Path(f"/proc/{pid}/autogroup")
    if nice and group.exists():
        with contextlib.suppress(OSError):  # no permission (not root), or it just exited
            group.write_text(str(nice))


def check_stream(procs: Processes, target: Target) -> None:
    """One stream read in full through the target: a 200, 32 content events, then [DONE]."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": TOKENS,
        "stream": True,
    }
    status, answer = http("POST", target.url, body, target.headers)
    events = [e for e in answer.split(b"\n\n") if e.startswith(b"data: ")]
    tokens = answer.count(TOKEN)
    if status != 200 or not events or events[-1] != b"data: [DONE]" or tokens != TOKENS:
        logs = procs.log_tail(target.name) if target.process is not None else ""
        raise SystemExit(
            f"{target.name} answers wrongly (HTTP {status}, {tokens} token events): "
            f"{answer[-400:]!r}\n{logs}"
        )


# --- what else the machine runs ---------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """CPU seconds so far: each of our processes, the machine, and work niced below ours."""

    ours: dict[str, float]
    machine: float
    background: dict[int, float]  # by pid: processes with a higher nice value than this one
    lost: dict[int, float]  # by core: interrupt, softirq and steal time

    @classmethod
    def now(cls, pids: dict[str, int]) -> Usage:
        # This process on its own: cpu_seconds counts descendants in, which are all the others.
        ours = cpu_seconds(pids) | {"main": sum(os.times()[:2])}
        return cls(ours, machine_cpu_seconds()[0], background_cpu(), lost_seconds())

    def lost_since(self, earlier: Usage, seconds: float) -> dict[int, float]:
        """Each core's share meanwhile lost to interrupts and the hypervisor."""
        return {core: (v - earlier.lost[core]) / seconds for core, v in self.lost.items()}

    def others_since(self, earlier: Usage, seconds: float) -> float:
        """Cores other work used meanwhile, less niced work (it yields to the bench's processes,
        as the nice-19 jobs of a shared machine do; counted, it would mark every paced run)."""
        ours = sum(self.ours[k] - earlier.ours.get(k, self.ours[k]) for k in self.ours)
        niced = self.niced_since(earlier, 1.0)
        return max(0.0, (self.machine - earlier.machine - ours - niced) / seconds)

    def niced_since(self, earlier: Usage, seconds: float) -> float:
        """Cores used meanwhile by the niced processes alive at both ends."""
        before = earlier.background
        return sum(v - before[p] for p, v in self.background.items() if p in before) / seconds


def lost_seconds() -> dict[int, float]:
    """Interrupt, softirq and steal seconds of each core so far (proc(5): /proc/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            found[int(name[3:])] = sum(int(v) for v in values[5:8]) / tick
    return found


def background_cpu() -> dict[int, float]:
    # Niced below the default and below the bench: at the default priority, work competes.
    floor = max(0, os.getpriority(os.PRIO_PROCESS, 0))
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[16]) > floor:  # field 19 of proc(5), its nice value
                    found[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    return found


# --- one measured run ---------------------------------------------------------------------------


def loadgen_argv(
    stack: Stack, target: Target, concurrency: int, args: argparse.Namespace
) -> list[str]:
    argv = [
        sys.executable,
        str(BENCH / "relay_load.py"),
        "--url",
        target.url,
        "--model",
        MODEL,
        "--concurrency",
        str(concurrency),
        "--warmup",
        str(args.warmup),
        "--window",
        str(args.window),
    ]
    for name, value in target.headers.items():
        argv += ["--header", f"{name}: {value}"]
    cores = stack.procs.layout.get("loadgen")
    if cores:
        argv = ["taskset", "-c", ",".join(map(str, sorted(cores))), *argv]
    return argv


def watched(stack: Stack, target: Target, loadgen: int) -> dict[str, int]:
    pids = {"upstream": stack.pid("upstream"), "loadgen": loadgen}
    if target.process is not None:
        pids["proxy"] = target.process.pid
    if target.name == "tollgate" and "redis" in stack.procs.started:
        pids["redis"] = stack.pid("redis")
    return pids


def measure(stack: Stack, target: Target, concurrency: int, args: argparse.Namespace) -> Run:
    """One window of the load generator against the target, with every process's CPU time."""
    log_path = stack.procs.home / "loadgen.log"
    out_path = stack.procs.home / "loadgen.json"
    with log_path.open("ab") as log:
        loadgen = subprocess.Popen(
            [*loadgen_argv(stack, target, concurrency, args), "--out", str(out_path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,  # an autogroup of its own, reniced below
        )
    renice_group(loadgen.pid, stack.procs.nice)
    # A hung client must not hang the bench: past its deadline it is killed and reads as EOF.
    watchdog = threading.Timer(args.warmup + args.window + 40, loadgen.kill)
    watchdog.start()
    try:
        assert loadgen.stdout is not None
        pids = watched(stack, target, loadgen.pid)
        expect(loadgen.stdout.readline(), b"window-start", log_path)
        before = Usage.now(pids)
        expect(loadgen.stdout.readline(), b"window-end", log_path)
        after = Usage.now(pids)
        loadgen.wait(timeout=30)
    finally:
        watchdog.cancel()
        if loadgen.poll() is None:
            loadgen.kill()
            loadgen.wait()
    if loadgen.returncode != 0 or not out_path.exists():
        raise SystemExit(
            f"the load generator failed (exit {loadgen.returncode}):\n{log_tail(log_path)}"
        )
    result = orjson.loads(out_path.read_bytes())
    out_path.unlink()
    used = {name: after.ours[name] - before.ours[name] for name in after.ours}
    window = float(result["window_s"])
    # A client still reading 10 s after the window is a stream that hung: an error too.
    unfinished = int(result["unfinished_clients"])
    examples = list(result["error_examples"])
    if unfinished:
        examples.append(f"{unfinished} streams unfinished 10 s after the window")
    return Run(
        target=target.name,
        completed=int(result["completed"]),
        window_s=window,
        errors=int(result["errors"]) + unfinished,
        error_examples=examples,
        ttft_ms=list(result["ttft_ms"]),
        total_ms=list(result["total_ms"]),
        cpu_s=used,
        others=after.others_since(before, window),
        niced=after.niced_since(before, window),
        client_load=client_load(used, after.lost_since(before, window), window, stack.procs.layout),
    )


def client_load(
    used: dict[str, float], lost: dict[int, float], window: float, layout: dict[str, set[int]]
) -> float:
    """How close the client came to its limit, 0-1 (or a little over, where the kernel charges
    softirq time to the process too): the load generator's core (pinned) or the machine
    (unpinned), with our processes there and what interrupts and the hypervisor took, or the
    load generator itself, one process and so at most one core, whichever is higher."""
    cores = layout.get("loadgen") or set(os.sched_getaffinity(0))
    there = ("loadgen", "upstream", "main") if layout else tuple(used)
    ours = sum(used.get(name, 0.0) for name in there) / window
    busy = (ours + sum(lost.get(core, 0.0) for core in cores)) / len(cores)
    return max(busy, used.get("loadgen", 0.0) / window)


def expect(line: bytes, wanted: bytes, log_path: Path) -> None:
    if line.strip() != wanted:
        raise SystemExit(f"the load generator said {line!r}, not {wanted!r}:\n{log_tail(log_path)}")


def log_tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


# --- the driver ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tools:
    nginx: str | None  # the binary, when nginx is a target
    litellm: Path | None  # LiteLLM's proxy command, when it is a target and installed
    cores: set[int]  # this process's cores at the start (unpinned runs get them all)


def bench_stack(layout_name: str, mode: str, args: argparse.Namespace, tools: Tools) -> list[Row]:
    """Starts the stub and the proxies for one layout and mode, runs every concurrency on them."""
    layout = cpu_layout(layout_name == "pinned")
    # Children started without taskset inherit this process's affinity: unpinned, all the cores;
    # pinned, this process keeps off the proxy's core.
    os.sched_setaffinity(0, layout.get("loadgen") or tools.cores)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="relay-bench-") as tmp, contextlib.ExitStack() as exits:
        procs = Processes(Path(tmp), layout, args.nice)
        try:
            redis_url = None
            if "tollgate" in args.targets:  # a private redis-server, on the proxy's core
                redis_url, _ = exits.enter_context(redis_server(procs, None))
            progress(f"[{layout_name} {mode}] starting the stub upstream and the proxies")
            stack = start_stack(procs, mode, args.targets, redis_url, tools.nginx, tools.litellm)
            for concurrency in args.concurrency:
                rows += bench_level(stack, (layout_name, mode, concurrency), args)
        finally:
            procs.stop_all()
    return rows


def bench_level(stack: Stack, where: tuple[str, str, int], args: argparse.Namespace) -> list[Row]:
    """Direct, each proxy, direct again (LiteLLM last: its overload must not touch the rest)."""
    by_name = {t.name: t for t in stack.targets}
    order = [("direct", "direct")]
    order += [(n, n) for n in ("nginx", "tollgate") if n in by_name]
    order += [("direct", "direct again")]
    order += [("litellm", "litellm")] if "litellm" in by_name else []
    runs = []
    for name, label in order:
        wait_quiet(stack, args.patience)
        run = measure(stack, by_name[name], where[2], args)
        progress(run_line(where, label, run))
        if run.others > OTHERS_LIMIT and args.retry:
            # Other work on the machine took a share of the cores: once more, keep the quieter.
            wait_quiet(stack, args.patience)
            again = measure(stack, by_name[name], where[2], args)
            progress(run_line(where, f"{label} (again: disturbed)", again))
            run = min(run, again, key=lambda r: r.others)
        runs.append(run)
    return summarize(where, runs)


def wait_quiet(stack: Stack, patience: float) -> None:
    """Until the rest of the machine uses at most OTHERS_LIMIT cores, `patience` s at most.

    Sampled over SETTLE_S, which also lets the proxy finish what the last run left it (Tollgate's
    ledger flush): our own processes' CPU is not counted as others'.
    """
    pids = {name: p.pid for name, p in stack.procs.started.items()}
    deadline = time.monotonic() + patience
    while True:
        before = Usage.now(pids)
        time.sleep(SETTLE_S)
        others = Usage.now(pids).others_since(before, SETTLE_S)
        if others <= OTHERS_LIMIT or time.monotonic() >= deadline:
            return


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="the gateway's relay cost next to nginx")
    parser.add_argument("--window", type=float, default=15.0, help="seconds measured per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before each window")
    parser.add_argument("--concurrency", default="50,200", help="concurrent streams, e.g. 50,200")
    parser.add_argument("--modes", default="burst,paced", help="burst, paced or both")
    parser.add_argument("--layouts", default="pinned,unpinned", help="pinned, unpinned or both")
    parser.add_argument("--targets", default=",".join(TARGETS), help="of " + ",".join(TARGETS))
    parser.add_argument(
        "--patience", type=float, default=5.0, help="seconds to wait for a quiet machine per run"
    )
    parser.add_argument(
        "--no-retry",
        dest="retry",
        action="store_false",
        help="do not repeat a run that other work on the machine disturbed",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=-10 if os.geteuid() == 0 else 0,
        help="the bench processes' priority (default: -10 as root, as gateway_overhead.py)",
    )
    parser.add_argument("--json", type=Path, help="also write the rows and goals to this file")
    args = parser.parse_args()
    args.concurrency = [int(x) for x in args.concurrency.split(",")]
    args.modes = choose(args.modes, ("burst", "paced"), "--modes")
    args.layouts = choose(args.layouts, ("pinned", "unpinned"), "--layouts")
    args.targets = [t for t in choose(args.targets, TARGETS, "--targets") if t != "direct"]
    return args


def choose(raw: str, allowed: Sequence[str], flag: str) -> list[str]:
    chosen = [x.strip() for x in raw.split(",") if x.strip()]
    wrong = [x for x in chosen if x not in allowed]
    if wrong or not chosen:
        raise SystemExit(f"{flag}: expected some of {','.join(allowed)}, got {raw!r}")
    return chosen


def find_tools(args: argparse.Namespace) -> Tools:
    litellm = LITELLM_VENV / "bin" / "litellm"
    if "litellm" in args.targets and not litellm.exists():
        progress(f"litellm left out: {litellm} is missing (bench/gateway_overhead.py makes it)")
        args.targets.remove("litellm")
    if "pinned" in args.layouts and not cpu_layout(True):
        progress("pinned left out: it needs 2 cores or more")
        args.layouts.remove("pinned")
    if not args.layouts:
        raise SystemExit("no layout left to measure")
    return Tools(
        nginx=ensure_nginx() if "nginx" in args.targets else None,
        litellm=litellm if "litellm" in args.targets else None,
        cores=os.sched_getaffinity(0),
    )


def main() -> None:
    args = parse_args()
    # SIGTERM (a timeout, a cancelled job) must still stop what the bench started (finally).
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    tools = find_tools(args)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.nice:
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)  # inherited by every process started
    started = time.monotonic()
    rows: list[Row] = []
    for layout_name in args.layouts:
        for mode in args.modes:
            rows += bench_stack(layout_name, mode, args, tools)
    settings = {
        "window_s": args.window,
        "warmup_s": args.warmup,
        "cores": len(tools.cores),
        "nice": args.nice,
        "tokens_per_stream": TOKENS,
    }
    print(
        f"Relay cost: {TOKENS}-token streams, {args.window:g} s windows after {args.warmup:g} s "
        f"of warm-up, {len(tools.cores)} cores, nice {args.nice}\n"
    )
    print_table(rows)
    results = goals(rows)
    print_goals(results)
    print(f"\n(the bench took {time.monotonic() - started:.0f} s)")
    if args.json:
        payload = {
            "settings": settings,
            "rows": [dataclasses.asdict(r) for r in rows],
            "goals": results,
        }
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
