"""What the gateway adds in front of a real vLLM server, measured by vLLM's own load generator.

`vllm bench serve` (from the environment `make test-vllm` builds) sends the same requests, with
long-tailed prompt and answer lengths (log-normal, a few answers ten times the median), to the
vLLM server directly and to Tollgate's gateway in front of it, in alternating rounds; the
gateway runs its whole admission (a tenant whose every budget is set). Printed side by side: TTFT,
TPOT and end-to-end latency (p50 and p99) and throughput per target, and what the gateway added.

    .venv/bin/python bench/vllm_gateway.py [--prompts 200] [--concurrency 8] [--rounds 2]

Needs Redis (REDIS_URL, default database 14) and python3.11 for the vLLM environment; the first
run builds that environment and the tiny model (a few minutes). Run it on a quiet machine: the
server, the gateway and the load generator share its cores.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: the gateway's snapshot schema is imported

from overhead_setup import TENANT_KEY as KEY  # noqa: E402
from overhead_setup import gateway_env, publish_snapshot, snapshot  # noqa: E402

MODEL = "tiny"
MAX_MODEL_LEN = 1024
METRICS = ("ttft", "tpot", "e2el")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 -- local URL
            return bool(response.status == 200)
    except OSError:
        return False


def wait(what: str, check: Any, seconds: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if process.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"{what} did not start (see its log)")
        time.sleep(0.5)


def environment() -> tuple[str, Path]:
    def ask(command: str) -> str:
        result = subprocess.run(
            [sys.executable, str(ROOT / "deploy" / "vllm" / "env.py"), command],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            sys.exit(result.stderr)
        return result.stdout.strip()

    return ask("venv"), Path(ask("model"))


def dataset(path: Path, prompts: int, seed: int) -> dict[str, float]:
    """Prompts and answer lengths drawn log-normal: most short, a few very long."""
    rng = np.random.default_rng(seed)
    words = (ROOT / "README.md").read_text().split()
    prompt_words = np.clip(rng.lognormal(np.log(40), 0.8, prompts), 4, 400).astype(int)
    output = np.clip(rng.lognormal(np.log(48), 0.9, prompts), 4, 600).astype(int)
    with path.open("w") as out:
        for n_words, n_out in zip(prompt_words, output, strict=True):
            start = int(rng.integers(0, len(words) - n_words))
            text = " ".join(words[start : start + n_words])
            out.write(json.dumps({"prompt": text, "output_tokens": int(n_out)}) + "\n")
    return {
        "output_p50": float(np.median(output)),
        "output_p99": float(np.percentile(output, 99)),
        "output_max": float(output.max()),
    }


def bench(
    python: str, model: Path, url: str, data: Path, args: argparse.Namespace, out: Path
) -> dict[str, float]:
    argv = [
        python, str(ROOT / "deploy" / "vllm" / "vllm_cli.py"), "bench", "serve",
        "--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions",
        "--model", MODEL, "--tokenizer", str(model / "base"),
        "--dataset-name", "custom", "--dataset-path", str(data), "--custom-output-len", "-1",
        "--num-prompts", str(args.prompts), "--max-concurrency", str(args.concurrency),
        "--ignore-eos", "--percentile-metrics", ",".join(METRICS), "--metric-percentiles",
        "50,99", "--save-result", "--result-dir", str(out.parent), "--result-filename",
        out.name, "--seed", "1", "--num-warmups", str(args.concurrency),
    ]  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": KEY, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"vllm bench serve failed against {url}:\n{result.stderr[-3000:]}")
    saved = json.loads(out.read_text())
    figures = {f"{m}_p{p}": float(saved[f"p{p}_{m}_ms"]) for m in METRICS for p in (50, 99)}
    figures["output_tok_s"] = float(saved["output_throughput"])
    figures["failed"] = float(saved.get("failed", 0) or 0)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    python, model = environment()
    home = Path(tempfile.mkdtemp(prefix="tollgate-vllm-bench-"))
    data = home / "requests.jsonl"
    shape = dataset(data, args.prompts, seed=7)
    vllm_port, gw_port, gw_metrics = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{vllm_port}"
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        serve = [
            python, str(ROOT / "deploy" / "vllm" / "vllm_cli.py"), "serve", str(model / "base"),
            "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(vllm_port),
            "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32", "--enforce-eager",
        ]  # fmt: skip
        vllm_env = {
            **os.environ,
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
        }
        with (home / "vllm.log").open("wb") as log:
            vllm = subprocess.Popen(
                serve,
                env=vllm_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        processes.append(vllm)
        wait("vLLM", lambda: answers(f"{upstream}/health"), 300, vllm)
        snap = snapshot(upstream, (MODEL,), max_model_len=MAX_MODEL_LEN)
        publish_snapshot(redis_url, snap)
        env = gateway_env(redis_url, gw_port, gw_metrics)
        with (home / "gateway.log").open("wb") as log:
            gateway = subprocess.Popen(
                [sys.executable, "-m", "gateway"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        processes.append(gateway)
        gateway_url = f"http://127.0.0.1:{gw_port}"
        wait("the gateway", lambda: answers(f"{gateway_url}/readyz"), 30, gateway)
        targets = {"vLLM directly": upstream, "gateway in front": gateway_url}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        for round_ in range(args.rounds):
            for name, url in targets.items():
                out = home / f"{name.split()[0]}-{round_}.json"
                runs[name].append(bench(python, model, url, data, args, out))
        report(runs, shape, args)
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)


def report(
    runs: dict[str, list[dict[str, float]]], shape: dict[str, float], args: argparse.Namespace
) -> None:
    print(
        f"\n{args.prompts} requests a run, {args.concurrency} at a time, {args.rounds} rounds; "
        f"answer length p50 {shape['output_p50']:.0f}, p99 {shape['output_p99']:.0f}, max "
        f"{shape['output_max']:.0f} tokens (ignore_eos); medians over rounds\n"
    )
    names = list(runs)
    columns = [f"{m}_p{p}" for m in METRICS for p in (50, 99)] + ["output_tok_s", "failed"]
    medians = {n: {c: float(np.median([r[c] for r in runs[n]])) for c in columns} for n in names}
    print(f"{'':<24}" + "".join(f"{n:>18}" for n in names) + f"{'added':>12}")
    for column in columns:
        direct, gateway = medians[names[0]][column], medians[names[1]][column]
        unit = "" if column in ("output_tok_s", "failed") else " ms"
        print(
            f"{column:<24}"
            + "".join(f"{medians[n][column]:>15.2f}{unit:<3}" for n in names)
            + f"{gateway - direct:>+10.2f}{unit}"
        )
    for name in names:
        each = ", ".join(f"{r['ttft_p50']:.1f}/{r['tpot_p50']:.2f}" for r in runs[name])
        print(f"  {name}: TTFT/TPOT p50 by round (ms): {each}")


if __name__ == "__main__":
    main()
