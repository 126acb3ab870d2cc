"""What Tollgate's gateway adds to a request, next to a direct call, nginx and the LiteLLM proxy.

    .venv/bin/python bench/gateway_overhead.py [--quick] [--json FILE]

One simfleet process is the upstream of four targets, each one process on this machine, measured
in one run under the same load by a separate load-generator process (aiohttp on uvloop):

  direct    the client talks to simfleet itself: the reference the other figures are added to
  tollgate  `python -m gateway`, one worker, budgets on: the tenant's Budget sets every limit (high
            enough never to trigger), so each request runs the Lua admission and settlement in
            Redis and appends its sample to the Redis stream
  nginx     the Debian package as a plain reverse proxy: one worker, proxy_buffering off,
            keepalive to the upstream
  litellm   `litellm --num_workers 1` (litellm==1.110.2), same upstream, rpm/tpm on the model
            entries (high enough never to trigger) with usage-based-routing-v2, which counts and
            checks them on every request (other strategies only use them as weights)

1. Added latency at 50 and 200 concurrent streams. That many streaming completions are held open
   through the target the whole time (a second simfleet model whose 40-50 ms step paces them
   like a loaded GPU: ~1,200 and ~4,000 token events/s to relay, all streams' tokens of a step
   arriving together, as vLLM sends them), and probes arrive on top (open loop, Poisson, 100/s
   for 20 s, every other one streaming) for a model with a ~1 ms step and max_tokens=16
   (ignore_eos): non-streaming round trip, and streaming TTFT (until the first chunk carrying
   content). "Added" is the target's percentile minus that of direct's two runs pooled (one
   before the proxies, one after): with 8 s windows the two direct runs' p99s differed by up to
   3 ms at 200 streams, too close to the 5 ms target to tell anything. (Short requests back
   to back at that concurrency would be 5,000+ req/s: a throughput test that no single Python
   process passes, not a measure of overhead at that concurrency.)
2. The highest request rate each target sustains: open-loop Poisson arrivals of the short
   requests (half streaming), stepped up from 20/s, each step long enough for 500 requests (20 s
   at most: with fewer a "p99" is the slowest one or two). A rate is sustained when nothing
   fails, all is answered and the p99 added latency (round trip and TTFT, against direct at the
   same rate and on the same arrival schedule) is at most 10 ms; a failing step is measured once
   more before it counts.
   Also reported: capacity, the highest rate answered in full with p99 added under 1 s. When
   direct itself saturates, the targets still in get "at least" (the bench's limit, not theirs).

Keeping a 2-core machine honest. The load generator and simfleet share CPU 0; the proxy under
test has CPU 1 (`taskset`; with 3+ cores each gets its own), and so does Tollgate's Redis, a
private redis-server (the shared one also serves other work, whose commands would delay the
gateway's; --redis-url uses an existing one instead). So a proxy, with what it needs, gets one core
and never competes with the client or the upstream; what CPU 0's contention adds is in the direct
figure too and cancels in the subtraction (a second direct run per concurrency level shows the
noise floor). The bench's processes run at nice -10 (as root), so other work on the machine
barely preempts them. Before each run the bench waits until simfleet runs nothing and every proxy
is idle (a proxy whose backlog does not drain in 10 s is restarted), and until the rest of the
machine is quiet (20 s at most); a run during which other processes used more than 0.4 cores
(--others-limit) is repeated once, then kept and marked `~`. Each process's CPU use is reported
in cores, from /proc, with what everything else on the machine used meanwhile ("others") and
what the hypervisor took ("steal": on a shared host one core may give only ~0.75 of a core).

Needs, installed by the script on first run where it can:
  - nginx: `apt-get install -y nginx` (as root the script does it). The system service is never
    started: nginx runs in the foreground from a config written into a temp dir.
  - LiteLLM in its own virtual environment, var/bench/litellm-venv, made as LITELLM.md says
    (the `proxy` extra cannot be installed as is); alone: `... gateway_overhead.py --setup-only`.
  - redis-server (the Debian package `redis-server`, which `make up` uses too).

This script parses the options and runs the phases (`main`); the rest is in modules beside it:
  overhead_setup.py    constants, the upstream's and proxies' configurations, installing them
  overhead_targets.py  our processes and their CPU use, starting and checking the targets, the CPU
                       layout, Tollgate's private Redis
  overhead_load.py     the load generator: probes and held streams, in a process of its own
  overhead_phases.py   the Bench driver, the figures, the concurrency phase and the rate sweep
  overhead_report.py   the tables, the JSON summary and the target ratios
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from overhead_load import Job
from overhead_phases import Bench, concurrency_phase, rate_phase
from overhead_report import ratios, report_concurrency, report_sweep
from overhead_setup import ensure_litellm, ensure_nginx
from overhead_targets import Processes, check_target, cpu_layout, redis_server, start_targets


def main() -> None:
    parser = argparse.ArgumentParser(description="Tollgate's overhead next to nginx and LiteLLM")
    parser.add_argument("--quick", action="store_true", help="shorter windows, coarser sweep")
    parser.add_argument("--redis-url", help="an existing Redis (database flushed) for Tollgate")
    parser.add_argument("--streams", default="50,200", help="concurrency levels (held streams)")
    parser.add_argument("--probe-rate", type=float, default=100.0, help="probes/s at each level")
    parser.add_argument("--limit-ms", type=float, default=10.0, help="p99 added latency allowed")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    parser.add_argument(
        "--others-limit", type=float, default=0.4, help="cores other work may use during a run"
    )
    parser.add_argument(
        "--nice", type=int, default=-10 if os.geteuid() == 0 else 0, help="the bench's priority"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--setup-only", action="store_true", help="install nginx and LiteLLM")
    args = parser.parse_args()
    # SIGTERM (a timeout, a CI job cancelled) must still stop what the bench started.
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    nginx, litellm = ensure_nginx(), ensure_litellm()
    if args.setup_only:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    started = time.monotonic()
    layout = cpu_layout(not args.no_pin)
    if layout:
        print(
            f"{os.cpu_count()} cores; pinned: load generator {sorted(layout['loadgen'])}, "
            f"simfleet {sorted(layout['upstream'])}, the proxy under test (and Tollgate's Redis) "
            f"{sorted(layout['proxy'])}; the bench's processes at nice {args.nice}"
        )
        os.sched_setaffinity(0, layout["loadgen"])  # keep the proxies' core free of this one
    os.setpriority(os.PRIO_PROCESS, 0, args.nice)
    levels = [int(x) for x in args.streams.split(",")]
    rates: list[float] = (
        [20, 50, 100, 150, 200, 300, 400, 600, 800, 1000, 1500, 2000, 3000]
        if args.quick
        else [20, 30, 50, 75, 100, 125, 150, 200, 250, 300, 400, 500, 600, 800, 1000, 1250, 1500,
              2000, 3000]
    )  # fmt: skip
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gateway-overhead-") as tmp:
        procs = Processes(Path(tmp), layout, args.nice)
        try:
            with redis_server(procs, args.redis_url) as (redis_url, redis_pid):
                targets = start_targets(procs, redis_url, nginx, litellm)
                for target in targets:
                    check_target(target)
                bench = Bench(procs, targets, redis_pid)
                bench.others_limit = args.others_limit
                try:
                    for target in targets:  # warm-up: connection pools, lazy imports, caches
                        bench.run(target, Job(target.url, target.headers, 20, 3, streams=20))
                    seconds = 8.0 if args.quick else 20.0
                    conc = concurrency_phase(bench, levels, seconds, args.probe_rate)
                    summary["concurrency"] = report_concurrency(conc, args.probe_rate)
                    sweeps = rate_phase(bench, rates, args.limit_ms, args.quick)
                finally:
                    bench.close()
        finally:
            procs.stop_all()
    summary["sweep"] = report_sweep(sweeps, args.limit_ms)
    ratios(conc, sweeps)
    print(f"\n(the bench took {time.monotonic() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
