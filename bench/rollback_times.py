"""How fast the rollout loop acts, measured end to end: time to roll back a bad candidate, time
for the gateway to stop sending to it, and time to promote a good one.

    .venv/bin/python bench/rollback_times.py [--runs 3]

Runs the end-to-end rollout tests (tests/e2e/test_rollouts.py: simfleet replicas, the gateway, a
Celery worker with beat, Postgres, Redis, 40 requests/s through the gateway) `--runs` times; each
test records what it measured, and this prints the median and worst of every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        timings = Path(tmp) / "timings.jsonl"
        for run in range(args.runs):
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "tests/e2e/test_rollouts.py",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                ],
                cwd=ROOT,
                env={**os.environ, "TOLLGATE_TIMINGS": str(timings)},
                capture_output=True,
                text=True,
                check=False,
            )
            last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
            print(f"run {run + 1}: {last}")
        figures: dict[str, list[float]] = defaultdict(list)
        for line in timings.read_text().splitlines():
            record = json.loads(line)
            figures[record["name"]].append(record["seconds"])
    print(f"\n{'figure':<55} {'median s':>9} {'worst s':>8} {'runs':>5}")
    for name, values in figures.items():
        print(f"{name:<55} {statistics.median(values):9.1f} {max(values):8.1f} {len(values):5d}")


if __name__ == "__main__":
    main()
