"""Two versions of the gateway side by side: direct, Tollgate and direct again at held streams.

    .venv/bin/python bench/overhead_versions.py CHECKOUT [--streams 200] [--seconds 20]

Runs the gateway overhead bench's own targets, load generator and CPU pinning (bench/overhead_*)
from CHECKOUT — a git worktree of another commit, e.g. `git worktree add /tmp/before <commit>` —
and measures only the concurrency phase's windows for direct, Tollgate and direct again (100
probes/s beside the held streams). Run it once for each checkout, one after the other, to tell a
change of the gateway from the noise of the machine, which the full bench's ordering (LiteLLM
restarted beside the proxies) can add to a single window.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="the checkout whose gateway is measured")
    parser.add_argument("--streams", type=int, default=200, help="held streams")
    parser.add_argument("--seconds", type=float, default=20.0, help="each window's length")
    args = parser.parse_args()
    root = args.checkout.resolve()
    # The checkout's own bench modules, so that its targets start its own gateway.
    sys.path[:0] = [str(root / "bench"), str(root)]
    from overhead_load import Job
    from overhead_phases import Bench, Figures
    from overhead_setup import ensure_litellm, ensure_nginx
    from overhead_targets import Processes, cpu_layout, redis_server, start_targets

    layout = cpu_layout(True)
    if layout:
        os.sched_setaffinity(0, layout["loadgen"])
    nginx, litellm = ensure_nginx(), ensure_litellm()
    with tempfile.TemporaryDirectory(prefix="overhead-versions-") as tmp:
        procs = Processes(Path(tmp), layout, -10 if os.geteuid() == 0 else 0)
        try:
            with redis_server(procs, None) as (redis_url, redis_pid):
                direct, tollgate, *_ = start_targets(procs, redis_url, nginx, litellm)
                bench = Bench(procs, [direct, tollgate, *_], redis_pid)
                try:
                    for target in (direct, tollgate):  # warm-up
                        bench.run(target, Job(target.url, target.headers, 20, 3, streams=20))
                    runs = ((direct, "direct"), (tollgate, "tollgate"), (direct, "direct-again"))
                    for target, label in runs:
                        job = Job(target.url, target.headers, 100.0, args.seconds, args.streams)
                        outcome = bench.run(target, job)
                        figures = Figures.of(outcome)
                        print(
                            f"{root.name} {args.streams} streams, {label}: RT p50/p99 "
                            f"{figures.rt[0]:.2f}/{figures.rt[1]:.2f} ms, TTFT p50/p99 "
                            f"{figures.ttft[0]:.2f}/{figures.ttft[1]:.2f} ms, cpu {outcome.cpu}",
                            flush=True,
                        )
                finally:
                    bench.close()
        finally:
            procs.stop_all()


if __name__ == "__main__":
    main()
