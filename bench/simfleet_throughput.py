"""How much load one simfleet process sustains: concurrent streams and generated tokens per second.

    .venv/bin/python bench/simfleet_throughput.py [--streams 2000] [--seconds 20]

Starts one simfleet replica whose profile asks for more than the target (2,000 streams at a
50 ms engine step: 40,000 tokens/s), keeps `--streams` streaming chat completions open against it
from a separate client process, and prints what was delivered next to what the profile asked for.
When the simulator keeps up, delivered/asked is close to 1 and the step time is the profile's;
when it falls behind, the ratio drops below 1 and the bench says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
import yaml

ROOT = Path(__file__).resolve().parent.parent
STEP_BASE_MS = 10.0
DECODE_PER_SEQ_MS = 0.02
MAX_TOKENS = 400


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fleet_yaml(port: int, streams: int) -> str:
    profile = {
        "name": "bench",
        "max_model_len": 4096,
        "kv_cache_tokens": streams * 1024,
        "max_num_seqs": streams * 2,
        "speed": {
            "step_base_ms": STEP_BASE_MS,
            "decode_per_seq_ms": DECODE_PER_SEQ_MS,
            "prefill_per_token_ms": 0.0005,
        },
    }
    return yaml.safe_dump({"seed": 1, "replicas": [{"port": port, "models": [profile]}]})


async def one_stream(
    session: aiohttp.ClientSession, url: str, tally: dict[str, int], max_tokens: int
) -> None:
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": "Benchmark the simulator, please."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    async with session.post(url, json=body) as response:
        response.raise_for_status()
        async for chunk in response.content.iter_any():
            tally["events"] += chunk.count(b"data: ")
    # Each stream also carries a role chunk and [DONE]: not generated tokens.
    tally["events"] -= 2
    tally["finished"] += 1


async def client(
    url: str,
    streams: int,
    seconds: float,
    queue: multiprocessing.Queue[dict[str, float]],
    ramped: Any,
) -> None:
    tally = {"events": 0, "finished": 0}
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        deadline = time.monotonic() + seconds
        active: set[asyncio.Task[None]] = set()
        errors = 0
        samples: list[tuple[float, int, int]] = []
        next_sample = time.monotonic()
        rng = random.Random(7)
        while time.monotonic() < deadline:
            while len(active) < streams:
                # Varied lengths, so that streams end and restart at different times.
                length = rng.randint(MAX_TOKENS // 4, MAX_TOKENS)
                task = asyncio.create_task(one_stream(session, url, tally, length))
                active.add(task)
            if time.monotonic() >= next_sample:
                samples.append((time.monotonic(), tally["events"], len(active)))
                next_sample += 1.0
            done, active = await asyncio.wait(active, timeout=0.25)
            errors += sum(1 for t in done if t.exception() is not None)
            if tally["events"] >= streams and not ramped.is_set():
                ramped.set()  # every stream has been answered at least once
        for task in active:
            task.cancel()
        await asyncio.gather(*active, return_exceptions=True)
    # Steady state: skip the first quarter (ramp-up), measure the rest.
    start = samples[len(samples) // 4]
    end = samples[-1]
    queue.put(
        {
            "tokens_per_s": (end[1] - start[1]) / (end[0] - start[0]),
            "min_concurrency": min(s[2] for s in samples[len(samples) // 4 :]),
            "errors": errors,
            "finished": tally["finished"],
        }
    )


def run_client(
    url: str,
    streams: int,
    seconds: float,
    queue: multiprocessing.Queue[dict[str, float]],
    ramped: Any,
) -> None:
    uvloop.run(client(url, streams, seconds, queue, ramped))


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 -- local URL
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        for name in (
            "vllm:num_requests_running{",
            "vllm:generation_tokens_total{",
            "vllm:inter_token_latency_seconds_sum{",
            "vllm:inter_token_latency_seconds_count{",
        ):
            if line.startswith(name):
                values[name.rstrip("{")] = float(line.rsplit(" ", 1)[1])
    return values


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    # Thousands of sockets on each side: lift the open-files limit to its hard maximum.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "fleet.yaml"
        config.write_text(fleet_yaml(port, args.streams))
        server = subprocess.Popen(
            [sys.executable, "-m", "simfleet", "--config", str(config)], cwd=ROOT
        )
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"{base}/health", timeout=1)  # noqa: S310
                    break
                except OSError:
                    time.sleep(0.1)
            queue: multiprocessing.Queue[dict[str, float]] = multiprocessing.Queue()
            ramped = multiprocessing.Event()
            process = multiprocessing.Process(
                target=run_client,
                args=(f"{base}/v1/chat/completions", args.streams, args.seconds, queue, ramped),
            )
            process.start()
            # Let the streams ramp up, then watch the steady state from simfleet's side.
            if not ramped.wait(timeout=args.seconds):
                raise SystemExit("the client never got every stream going")
            time.sleep(1.0)
            before_cpu = _cpu_seconds(server.pid)
            before = scrape(f"{base}/metrics")
            started = time.monotonic()
            running = []
            while time.monotonic() < started + args.seconds * 0.6:
                time.sleep(1.0)
                running.append(scrape(f"{base}/metrics")["vllm:num_requests_running"])
            after = scrape(f"{base}/metrics")
            elapsed = time.monotonic() - started
            server_cpu = (_cpu_seconds(server.pid) - before_cpu) / elapsed
            result = queue.get(timeout=args.seconds + 120)
            process.join()
        finally:
            server.terminate()
            server.wait(timeout=20)

    asked_step_ms = STEP_BASE_MS + DECODE_PER_SEQ_MS * args.streams
    asked = args.streams / (asked_step_ms / 1000.0)
    generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    itl_count = (
        after["vllm:inter_token_latency_seconds_count"]
        - before["vllm:inter_token_latency_seconds_count"]
    )
    itl_sum = (
        after["vllm:inter_token_latency_seconds_sum"]
        - before["vllm:inter_token_latency_seconds_sum"]
    )
    report = {
        "streams_requested": args.streams,
        "simfleet_running_min": int(min(running)),
        "simfleet_running_mean": round(sum(running) / len(running)),
        "client_min_concurrency": int(result["min_concurrency"]),
        "profile_step_ms": round(asked_step_ms, 1),
        "profile_tokens_per_s": round(asked),
        "simfleet_tokens_per_s": round(generated / elapsed),
        "client_received_tokens_per_s": round(result["tokens_per_s"]),
        "delivered_over_asked": round(generated / elapsed / asked, 3),
        "simfleet_mean_step_ms": round(1000 * itl_sum / itl_count, 1) if itl_count else None,
        "simfleet_cpu_cores": round(server_cpu, 2),
        "client_errors": int(result["errors"]),
        "completed_streams": int(result["finished"]),
    }
    print(json.dumps(report, indent=2))
    # Concurrent streams: HTTP streams open at once, as the client keeps them (a finished one is
    # replaced at once; simfleet's running gauge dips for the moment in between).
    meets = (
        result["min_concurrency"] >= 2000
        and min(generated / elapsed, result["tokens_per_s"]) >= 20000
    )
    verdict = "met" if meets else "NOT met"
    print(f"target (>= 2,000 concurrent streams and >= 20,000 tokens/s): {verdict}")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
