"""What Tollgate's gateway adds to a request, next to a direct call, nginx and the LiteLLM proxy.

    .venv/bin/python bench/gateway_overhead.py [--quick]

One simfleet process is the upstream of four targets, each one process on the same machine, all
measured in one run under the same load from a separate load-generator process (aiohttp, uvloop):

  direct    the client talks to simfleet itself: the reference every other figure is added to
  tollgate  `python -m gateway`, one worker, budgets on: the tenant has a Budget with every limit
            set (high enough never to trigger), so each request runs the Lua admission and the
            settlement in Redis and writes its sample to the Redis stream
  nginx     the Debian package as a plain reverse proxy (proxy_buffering off, keepalive upstream)
  litellm   `litellm --num_workers 1` (litellm==1.110.2) with the same upstream, rpm/tpm on the
            model entries (high enough never to trigger) and usage-based-routing-v2, which counts
            and checks them on every request (without it LiteLLM only uses them as weights)

What it measures:

  1. Added latency at 50 and 200 concurrent streams. That many long streaming completions are held
     open through the target (a second simfleet model with a 40-50 ms step, like a loaded GPU:
     about 1,200 and 4,000 token events/s to relay), and probe requests arrive on top of them
     (open loop, Poisson, 100/s, every other one streaming) for a short model with a ~1 ms step
     and max_tokens=16 (ignore_eos): non-streaming round trip and streaming TTFT (time to the
     first chunk carrying content). "Added" is the target's percentile minus direct's percentile
     under the same load. Short requests back to back at that concurrency would be 5,000+ req/s,
     a throughput test no single Python process passes; held streams plus probes measure the
     overhead at that concurrency instead.
  2. The highest request rate each target sustains: open-loop Poisson arrivals of the short
     requests (half of them streaming), stepped up; a rate passes when nothing failed, everything
     sent came back, and the p99 added latency (round trip and TTFT, each against direct at the
     same rate and the same arrival schedule) is under 10 ms. A failing step is measured once more
     before the target is out. When direct itself saturates, the targets still in are reported as
     "at least" the last rate (the bench's own limit, not theirs).

Keeping a 2-core machine honest: the load generator and simfleet share CPU 0 and each proxy gets
CPU 1 to itself (`taskset`; with 3+ cores, each of the three gets its own). So the proxy under
test never competes with the client or the upstream, and whatever CPU 0's contention adds to
latency is in the direct figure too and cancels in the subtraction; direct is measured under the
same load in the same run, and a second direct run at the end of each concurrency level shows
the noise floor. Redis is the system's (not pinned; only Tollgate uses it, and its CPU is
reported). Each process's CPU use (cores, from /proc) is reported per run. Other work on the
machine distorts everything: the bench prints the machine's load before it starts.

Needs, installed by the script on first run where it can:
  - nginx: `apt-get install -y nginx` (run as root, the script does it). It never starts the
    system service: nginx runs from a config written into a temp dir, `daemon off`.
  - LiteLLM in its own virtual environment, var/bench/litellm-venv (see LITELLM.md: the `proxy`
    extra cannot be installed as is). The script creates it when missing; by hand, that is
    `.venv/bin/python bench/gateway_overhead.py --setup-only`.
  - Redis: --redis-url (default redis://127.0.0.1:6379/9), a database of its own, flushed before
    and after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import math
import multiprocessing
import os
import random
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import redis
import uvloop
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: the gateway's snapshot schema is imported below

from gateway.snapshot import (  # noqa: E402 -- needs the path above
    CHANGED_CHANNEL,
    SNAPSHOT_KEY,
    ApiKey,
    Arm,
    Budget,
    Deployment,
    Replica,
    Route,
    Snapshot,
    Tenant,
)

LITELLM_VERSION = "1.110.2"
LITELLM_VENV = ROOT / "var" / "bench" / "litellm-venv"
# Extras of litellm[proxy] that the index lacks or pins to builds it lacks (LITELLM.md).
LITELLM_SKIP = {"litellm-proxy"}
LITELLM_UNPIN = {"litellm-proxy-extras", "litellm-enterprise"}

FAST_MODEL = "bench"  # the probes: ~1 ms steps, so the upstream is never the bottleneck
STREAM_MODEL = "bench-streams"  # the held streams: paced like a loaded GPU
MAX_TOKENS = 16
STREAM_TOKENS = (60, 140)  # length of each held stream, drawn per stream
TENANT_KEY = "tk_bench_" + "0" * 24
BIG = 10**12  # a budget limit that is checked on every request and never reached
PROMPT = "Benchmark the gateway overhead, please."


# --- the upstream and the targets ----------------------------------------------------------------


def fleet_yaml(port: int) -> str:
    # Answers far longer than max_tokens, so every answer is cut at max_tokens whether or not a
    # proxy passes ignore_eos on.
    long_answers = {"distribution": "lognormal", "mean": 100000, "sigma": 0.0}
    models = [
        {
            "name": FAST_MODEL,
            "max_model_len": 4096,
            "kv_cache_tokens": 4_000_000,
            "max_num_seqs": 100_000,
            "speed": {"step_base_ms": 1.0, "decode_per_seq_ms": 0.005, "prefill_per_token_ms": 0},
            "output": long_answers,
        },
        {
            "name": STREAM_MODEL,
            "max_model_len": 4096,
            "kv_cache_tokens": 4_000_000,
            "max_num_seqs": 100_000,
            "speed": {"step_base_ms": 40.0, "decode_per_seq_ms": 0.05, "prefill_per_token_ms": 0},
            "output": long_answers,
        },
    ]
    return yaml.safe_dump({"seed": 1, "replicas": [{"port": port, "models": models}]})


def snapshot(upstream: str) -> Snapshot:
    """One tenant whose budget sets every limit (never reached), one route per simfleet model."""
    budget = Budget(
        requests_per_minute=BIG,
        input_tokens_per_minute=BIG,
        output_tokens_per_minute=BIG,
        tokens_per_day=BIG,
        tokens_per_month=BIG,
        max_concurrent_requests=BIG,
        max_context_tokens=100_000,
        max_output_tokens=100_000,
    )
    deployments = {
        name: Deployment(
            id=name,
            served_model_name=name,
            replicas=(Replica(id=f"{name}-0", base_url=upstream),),
            # The gateway's own in-flight shedding must not fire during a rate sweep.
            max_in_flight_per_replica=1_000_000,
        )
        for name in (FAST_MODEL, STREAM_MODEL)
    }
    return Snapshot(
        version=time.time_ns() // 1000,
        generated_at=dt.datetime.now(dt.UTC),
        tenants={"bench": Tenant(id="bench", slug="bench", budget=budget)},
        keys={
            hashlib.sha256(TENANT_KEY.encode()).hexdigest(): ApiKey(
                id="k1", tenant_id="bench", prefix="tk_bench"
            )
        },
        routes={
            name: Route(name=name, arms=(Arm(name="baseline", deployment_id=name, weight=100),))
            for name in (FAST_MODEL, STREAM_MODEL)
        },
        deployments=deployments,
    )


def nginx_conf(home: Path, port: int, upstream_port: int) -> str:
    temp = "\n".join(
        f"    {kind}_temp_path {home / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""
daemon off;
worker_processes 1;
pid {home / "nginx.pid"};
error_log {home / "error.log"} warn;
events {{ worker_connections 16384; }}
http {{
    access_log off;
{temp}
    upstream simfleet {{
        server 127.0.0.1:{upstream_port};
        keepalive 1024;
        keepalive_requests 1000000;
        keepalive_timeout 60s;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        keepalive_requests 1000000;
        location / {{
            proxy_pass http://simfleet;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""


def litellm_yaml(upstream: str) -> str:
    entries = [
        {
            "model_name": name,
            "litellm_params": {
                "model": f"openai/{name}",
                "api_base": f"{upstream}/v1",
                "api_key": "sk-simfleet",
                # A tenant's limits, checked on every request by usage-based-routing-v2.
                "rpm": BIG,
                "tpm": BIG,
            },
        }
        for name in (FAST_MODEL, STREAM_MODEL)
    ]
    settings = {"routing_strategy": "usage-based-routing-v2", "enable_pre_call_checks": True}
    return yaml.safe_dump({"model_list": entries, "router_settings": settings})


# --- installing what the bench needs -------------------------------------------------------------


def ensure_nginx() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found:
        return found
    apt = shutil.which("apt-get")
    if os.geteuid() != 0 or apt is None:
        raise SystemExit("nginx is missing: run `apt-get install -y nginx` as root, then again")
    print("installing nginx: apt-get install -y nginx", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([apt, "install", "-y", "nginx"], check=True, env=env, stdout=subprocess.DEVNULL)
    return shutil.which("nginx") or "/usr/sbin/nginx"


def litellm_proxy_requirements(metadata: str) -> list[str]:
    """The `proxy` extra of litellm's wheel, minus what the index cannot provide (LITELLM.md)."""
    wanted = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist: "):
            continue
        requirement = Requirement(line.removeprefix("Requires-Dist: "))
        marker = requirement.marker
        if marker is None or not marker.evaluate({"extra": "proxy"}):
            continue
        if marker.evaluate({"extra": ""}) or requirement.name in LITELLM_SKIP:
            continue  # a base requirement (comes with litellm), or not on the index
        if requirement.name in LITELLM_UNPIN:
            wanted.append(requirement.name)
            continue
        requirement.marker = None
        wanted.append(str(requirement))
    return wanted


def ensure_litellm() -> Path:
    binary = LITELLM_VENV / "bin" / "litellm"
    stamp = LITELLM_VENV / ".bench-installed"
    if binary.exists() and stamp.exists() and stamp.read_text().strip() == LITELLM_VERSION:
        return binary
    print(f"creating {LITELLM_VENV} with litellm=={LITELLM_VERSION} (a few minutes)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
    pip = [str(LITELLM_VENV / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([*pip, "download", "--no-deps", "-d", tmp, f"litellm=={LITELLM_VERSION}"])
        wheel = next(Path(tmp).glob("litellm-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            metadata = archive.read(f"litellm-{LITELLM_VERSION}.dist-info/METADATA").decode()
    extras = litellm_proxy_requirements(metadata)
    print("  pip install litellm==" + LITELLM_VERSION + " " + " ".join(extras), file=sys.stderr)
    subprocess.run([*pip, "install", f"litellm=={LITELLM_VERSION}", *extras], check=True)
    stamp.write_text(LITELLM_VERSION + "\n")
    return binary


# --- processes -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Target:
    name: str
    base_url: str
    headers: dict[str, str]
    pid: int | None  # the proxy's process (its children counted too); None for direct


class Processes:
    """The processes this bench started, each in its own session, stopped by their own ids."""

    def __init__(self, home: Path, pin: dict[str, set[int]]) -> None:
        self.home = home
        self.pin = pin
        self.started: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(
        self, name: str, argv: list[str], *, cpus: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        taskset = shutil.which("taskset")
        if self.pin and taskset:
            cores = ",".join(str(c) for c in sorted(self.pin[cpus]))
            argv = [taskset, "-c", cores, *argv]
        log = (self.home / f"{name}.log").open("wb")
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.started.append((name, process))
        return process

    def log_tail(self, name: str) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop_all(self) -> None:
        for _, process in reversed(self.started):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for _, process in reversed(self.started):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)


def http(
    method: str, url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    data = orjson.dumps(body) if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 -- local URL
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())


def wait_until(
    what: str, check: Any, process: subprocess.Popen[bytes], procs: Processes, seconds: float
) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited:\n{procs.log_tail(what)}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what} did not come up in {seconds:g} s:\n{procs.log_tail(what)}")


def start_targets(procs: Processes, redis_url: str, nginx: str, litellm: Path) -> list[Target]:
    home = procs.home
    sim_port, gw_port, ng_port, ll_port = (free_port() for _ in range(4))
    upstream = f"http://127.0.0.1:{sim_port}"

    (home / "fleet.yaml").write_text(fleet_yaml(sim_port))
    sim = procs.start(
        "simfleet", [sys.executable, "-m", "simfleet", "--config", str(home / "fleet.yaml")],
        cpus="upstream",
    )  # fmt: skip
    wait_until("simfleet", lambda: http("GET", f"{upstream}/health")[0] == 200, sim, procs, 30)

    snap = snapshot(upstream)
    client = redis.Redis.from_url(redis_url)
    client.set(SNAPSHOT_KEY, snap.model_dump_json())
    client.publish(CHANGED_CHANNEL, str(snap.version))
    client.close()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "GATEWAY_PORT": str(gw_port),
        "GATEWAY_WORKERS": "1",
        "GATEWAY_SNAPSHOT_POLL_S": "1",
        "GATEWAY_SAMPLES_MAX_LEN": "100000",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    gw = procs.start("tollgate", [sys.executable, "-m", "gateway"], cpus="proxy", env=env)
    gw_url = f"http://127.0.0.1:{gw_port}"

    def applied() -> bool:
        status, body = http("GET", f"{gw_url}/readyz")
        return status == 200 and orjson.loads(body).get("snapshot_version") == snap.version

    wait_until("tollgate", applied, gw, procs, 30)

    ng_home = home / "nginx"
    ng_home.mkdir()
    (ng_home / "nginx.conf").write_text(nginx_conf(ng_home, ng_port, sim_port))
    ng = procs.start(
        "nginx",
        [nginx, "-p", str(ng_home), "-c", str(ng_home / "nginx.conf"), "-e", str(ng_home / "e.log")],
        cpus="proxy",
    )
    ng_url = f"http://127.0.0.1:{ng_port}"
    wait_until("nginx", lambda: http("GET", f"{ng_url}/health")[0] == 200, ng, procs, 30)

    (home / "litellm.yaml").write_text(litellm_yaml(upstream))
    master = "sk-" + secrets.token_hex(16)
    env = {
        **os.environ,
        "LITELLM_MASTER_KEY": master,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
    }
    ll = procs.start(
        "litellm",
        [str(litellm), "--config", str(home / "litellm.yaml"), "--host", "127.0.0.1",
         "--port", str(ll_port), "--num_workers", "1"],
        cpus="proxy", env=env,
    )  # fmt: skip
    ll_url = f"http://127.0.0.1:{ll_port}"
    wait_until(
        "litellm", lambda: http("GET", f"{ll_url}/health/liveliness")[0] == 200, ll, procs, 90
    )
    return [
        Target("direct", upstream, {}, None),
        Target("tollgate", gw_url, {"authorization": f"Bearer {TENANT_KEY}"}, gw.pid),
        Target("nginx", ng_url, {}, ng.pid),
        Target("litellm", ll_url, {"authorization": f"Bearer {master}"}, ll.pid),
    ]


def check_target(target: Target) -> None:
    """One answer of each kind, read in full: the right length, content, and the end of stream."""
    url = f"{target.base_url}/v1/chat/completions"
    status, body = http("POST", url, probe_body(stream=False), target.headers)
    if status != 200:
        raise SystemExit(f"{target.name}: HTTP {status}: {body[:300]!r}")
    answer = orjson.loads(body)
    if answer["usage"]["completion_tokens"] != MAX_TOKENS or not answer["choices"][0]["message"][
        "content"
    ]:
        raise SystemExit(f"{target.name}: unexpected answer {body[:300]!r}")
    status, body = http("POST", url, probe_body(stream=True), target.headers)
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    content = sum(1 for e in events if e != b"data: [DONE]" and has_content(e))
    if status != 200 or events[-1] != b"data: [DONE]" or content != MAX_TOKENS:
        raise SystemExit(f"{target.name}: unexpected stream ({content} tokens): {body[-300:]!r}")


# --- CPU accounting --------------------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and of its live descendants (nginx's worker, LiteLLM's workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                children.setdefault(int(_stat(int(entry.name))[1]), []).append(int(entry.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError, IndexError):
            fields = _stat(current)
            total += int(fields[11]) + int(fields[12])
        todo.extend(children.get(current, ()))
    return total / os.sysconf("SC_CLK_TCK")


def machine_busy(seconds: float = 1.0) -> float:
    """Cores busy on the whole machine over a short look (other work distorts the bench)."""

    def sample() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = values[3] + values[4]
        return sum(values) - idle, sum(values)

    busy0, total0 = sample()
    time.sleep(seconds)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(1, total1 - total0) * (os.cpu_count() or 1)


# --- the load generator (its own process) ----------------------------------------------------------


@dataclass(frozen=True)
class Job:
    url: str
    headers: dict[str, str]
    rate: float  # probe arrivals per second (Poisson); every other probe streams
    seconds: float  # the measured window
    streams: int = 0  # long streams held open through the target meanwhile
    seed: int = 1


@dataclass
class Outcome:
    rt_ms: list[float] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    sent: int = 0
    errors: int = 0
    error_examples: list[str] = field(default_factory=list)
    max_lag_ms: float = 0.0  # how far the dispatcher fell behind the arrival schedule
    streams_min_open: int = 0
    stream_events_per_s: float = 0.0
    stream_errors: int = 0
    wall_s: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # cores, filled in by the parent


def probe_body(*, stream: bool) -> dict[str, Any]:
    return {
        "model": FAST_MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "stream": stream,
    }


def has_content(event: bytes) -> bool:
    if not event.startswith(b"data: ") or event == b"data: [DONE]":
        return False
    try:
        payload = orjson.loads(event[6:])
    except orjson.JSONDecodeError:
        return False
    return any((c.get("delta") or {}).get("content") for c in payload.get("choices") or ())


class Load:
    def __init__(self, session: aiohttp.ClientSession, job: Job) -> None:
        self.session = session
        self.job = job
        self.out = Outcome()
        headers = {"content-type": "application/json", **job.headers}
        self.headers = headers
        self.plain = orjson.dumps(probe_body(stream=False))
        self.streaming = orjson.dumps(probe_body(stream=True))
        self.open_streams = 0
        self.stream_events = 0
        self.stopping = False

    def _error(self, what: str) -> None:
        self.out.errors += 1
        if len(self.out.error_examples) < 3:
            self.out.error_examples.append(what[:200])

    async def plain_probe(self) -> None:
        started = time.perf_counter()
        try:
            async with self.session.post(
                self.job.url, data=self.plain, headers=self.headers
            ) as response:
                body = await response.read()
            elapsed = time.perf_counter() - started
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._error(f"{type(exc).__name__}: {exc}")
            return
        if response.status != 200 or b"choices" not in body:
            self._error(f"HTTP {response.status}: {body[:150]!r}")
            return
        self.out.rt_ms.append(elapsed * 1000)

    async def stream_probe(self) -> None:
        started = time.perf_counter()
        first: float | None = None
        buffer, tail = b"", b""
        try:
            async with self.session.post(
                self.job.url, data=self.streaming, headers=self.headers
            ) as response:
                if response.status != 200:
                    self._error(f"HTTP {response.status}: {(await response.read())[:150]!r}")
                    return
                async for chunk in response.content.iter_any():
                    if first is None:
                        now = time.perf_counter()
                        buffer += chunk
                        *events, buffer = buffer.split(b"\n\n")
                        if any(has_content(event) for event in events):
                            first = now
                    tail = (tail + chunk)[-64:]
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._error(f"{type(exc).__name__}: {exc}")
            return
        if first is None or not tail.rstrip().endswith(b"data: [DONE]"):
            self._error(f"incomplete stream: {tail!r}")
            return
        self.out.ttft_ms.append((first - started) * 1000)

    async def held_stream(self, index: int) -> None:
        rng = random.Random(index)
        # Spread the starts, so that the streams do not all end and restart together.
        await asyncio.sleep(index * 0.005)
        while not self.stopping:
            body = {
                "model": STREAM_MODEL,
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": rng.randint(*STREAM_TOKENS),
                "ignore_eos": True,
                "stream": True,
            }
            try:
                async with self.session.post(
                    self.job.url, data=orjson.dumps(body), headers=self.headers
                ) as response:
                    if response.status != 200:
                        raise aiohttp.ClientResponseError(
                            response.request_info, (), status=response.status
                        )
                    self.open_streams += 1
                    try:
                        async for chunk in response.content.iter_any():
                            self.stream_events += chunk.count(b"data: ")
                    finally:
                        self.open_streams -= 1
            except (aiohttp.ClientError, TimeoutError, OSError):
                self.out.stream_errors += 1
                await asyncio.sleep(0.1)

    async def run(self) -> Outcome:
        job, out = self.job, self.out
        holders = [asyncio.create_task(self.held_stream(i)) for i in range(job.streams)]
        if holders:
            # Ramp: every stream open, then a moment for the starts to spread out.
            deadline = time.perf_counter() + 30
            while self.open_streams < job.streams and time.perf_counter() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
        events_before, started = self.stream_events, time.perf_counter()
        sampler = asyncio.create_task(self._sample_open())
        rng = random.Random(job.seed)
        probes: set[asyncio.Task[None]] = set()
        at, end = started, started + job.seconds
        while True:
            at += rng.expovariate(job.rate)
            if at >= end:
                break
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                out.max_lag_ms = max(out.max_lag_ms, -delay * 1000)
            coroutine = self.stream_probe() if out.sent % 2 else self.plain_probe()
            task = asyncio.create_task(coroutine)
            probes.add(task)
            task.add_done_callback(probes.discard)
            out.sent += 1
        window = time.perf_counter() - started
        out.stream_events_per_s = (self.stream_events - events_before) / window
        sampler.cancel()
        if probes:
            _, late = await asyncio.wait(set(probes), timeout=30)
            for task in late:
                task.cancel()
                self._error("no answer within 30 s")
        self.stopping = True
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, sampler, return_exceptions=True)
        return out

    async def _sample_open(self) -> None:
        self.out.streams_min_open = self.open_streams
        while True:
            self.out.streams_min_open = min(self.out.streams_min_open, self.open_streams)
            await asyncio.sleep(0.05)


async def run_job(job: Job) -> Outcome:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120, sock_read=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.perf_counter()
        outcome = await Load(session, job).run()
        outcome.wall_s = time.perf_counter() - started
        return outcome


def load_generator(conn: Connection, cpus: set[int]) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    while True:
        job = conn.recv()
        if job is None:
            return
        conn.send(uvloop.run(run_job(job)))


class LoadGenerator:
    def __init__(self, cpus: set[int]) -> None:
        self._conn, child = multiprocessing.Pipe()
        self.process = multiprocessing.Process(target=load_generator, args=(child, cpus))
        self.process.start()

    def run(self, job: Job, watch: dict[str, int]) -> Outcome:
        """Runs one job; `watch` names the processes whose CPU use to report (cores)."""
        assert self.process.pid is not None
        watch = {"loadgen": self.process.pid, **watch}
        before = {name: cpu_seconds(pid) for name, pid in watch.items()}
        started = time.monotonic()
        self._conn.send(job)
        outcome: Outcome = self._conn.recv()
        elapsed = time.monotonic() - started
        outcome.cpu = {
            name: round((cpu_seconds(pid) - before[name]) / elapsed, 2)
            for name, pid in watch.items()
        }
        return outcome

    def close(self) -> None:
        self._conn.send(None)
        self.process.join(timeout=10)


# --- statistics and the report ---------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Figures:
    rt: tuple[float, float]  # p50, p99 in ms
    ttft: tuple[float, float]

    @classmethod
    def of(cls, outcome: Outcome) -> Figures:
        return cls(
            rt=(percentile(outcome.rt_ms, 0.5), percentile(outcome.rt_ms, 0.99)),
            ttft=(percentile(outcome.ttft_ms, 0.5), percentile(outcome.ttft_ms, 0.99)),
        )

    def minus(self, other: Figures) -> Figures:
        return Figures(
            rt=(self.rt[0] - other.rt[0], self.rt[1] - other.rt[1]),
            ttft=(self.ttft[0] - other.ttft[0], self.ttft[1] - other.ttft[1]),
        )


def fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def watch_for(target: Target, sim_pid: int, redis_pid: int | None) -> dict[str, int]:
    watch = {"simfleet": sim_pid}
    if target.pid is not None:
        watch["proxy"] = target.pid
    if target.name == "tollgate" and redis_pid is not None:
        watch["redis"] = redis_pid
    return watch


def concurrency_phase(
    loadgen: LoadGenerator,
    targets: list[Target],
    levels: list[int],
    seconds: float,
    probe_rate: float,
    sim_pid: int,
    redis_pid: int | None,
) -> dict[int, dict[str, tuple[Outcome, Figures]]]:
    results: dict[int, dict[str, tuple[Outcome, Figures]]] = {}
    # Direct once more at the end: the gap between the two direct runs is the noise floor.
    order = [*targets, dataclasses.replace(targets[0], name="direct-again")]
    for level in levels:
        results[level] = {}
        for target in order:
            job = Job(
                url=f"{target.base_url}/v1/chat/completions",
                headers=target.headers,
                rate=probe_rate,
                seconds=seconds,
                streams=level,
                seed=level,
            )
            outcome = loadgen.run(job, watch_for(target, sim_pid, redis_pid))
            figures = Figures.of(outcome)
            results[level][target.name] = (outcome, figures)
            progress(
                f"{level} streams, {target.name}: RT p50/p99 {fmt(figures.rt[0])}/"
                f"{fmt(figures.rt[1])} ms, TTFT {fmt(figures.ttft[0])}/{fmt(figures.ttft[1])} ms, "
                f"open streams >= {outcome.streams_min_open}, errors {outcome.errors}, "
                f"cpu {outcome.cpu}"
            )
            time.sleep(0.5)
    return results


@dataclass
class Sweep:
    sustained: float = 0.0  # the last rate that passed
    failed_at: float | None = None
    reason: str = ""
    cpu_at_sustained: dict[str, float] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)


def sweep_window(rate: float, quick: bool) -> float:
    # Enough samples for a p99 at every rate, without spending minutes at the low ones.
    return min(2.5 if quick else 5.0, max(1.0 if quick else 2.0, (400 if quick else 800) / rate))


def rate_phase(
    loadgen: LoadGenerator,
    targets: list[Target],
    rates: list[float],
    limit_ms: float,
    quick: bool,
    sim_pid: int,
    redis_pid: int | None,
) -> dict[str, Sweep]:
    direct, proxies = targets[0], targets[1:]
    sweeps = {t.name: Sweep() for t in targets}
    active = list(proxies)
    reference_p99: float | None = None
    for rate in rates:
        if not active:
            break
        seconds = sweep_window(rate, quick)
        failing: list[tuple[Target, str]] = []
        for attempt in range(2):
            base = loadgen.run(
                Job(f"{direct.base_url}/v1/chat/completions", direct.headers, rate, seconds),
                watch_for(direct, sim_pid, redis_pid),
            )
            base_fig = Figures.of(base)
            if reference_p99 is None:
                reference_p99 = base_fig.rt[1]
            problem = verdict(base, rate, seconds, None, base_fig, limit_ms)
            if problem is None and base_fig.rt[1] - reference_p99 > limit_ms:
                problem = f"its own p99 rose {base_fig.rt[1] - reference_p99:.1f} ms"
            progress(f"{rate:g}/s direct: RT p99 {fmt(base_fig.rt[1])} ms, "
                     f"TTFT p99 {fmt(base_fig.ttft[1])} ms, {problem or 'ok'}, cpu {base.cpu}")  # fmt: skip
            if problem is not None:
                if attempt == 0:
                    continue
                for target in active:
                    sweeps[target.name].reason = (
                        f"at least: direct itself saturates at {rate:g}/s ({problem})"
                    )
                sweeps[direct.name].failed_at = rate
                sweeps[direct.name].reason = problem
                return sweeps
            sweeps[direct.name].sustained = rate
            candidates = [t for t, _ in failing] if attempt else active
            failing = []
            for target in candidates:
                job = Job(f"{target.base_url}/v1/chat/completions", target.headers, rate, seconds)
                outcome = loadgen.run(job, watch_for(target, sim_pid, redis_pid))
                figures = Figures.of(outcome)
                problem = verdict(outcome, rate, seconds, base_fig, figures, limit_ms)
                added = figures.minus(base_fig)
                line = (
                    f"{rate:g}/s {target.name}: added p99 RT {fmt(added.rt[1])} ms, "
                    f"TTFT {fmt(added.ttft[1])} ms, {problem or 'ok'}, cpu {outcome.cpu}"
                )
                progress(line)
                sweeps[target.name].steps.append(line)
                if problem is None:
                    sweeps[target.name].sustained = rate
                    sweeps[target.name].cpu_at_sustained = outcome.cpu
                else:
                    failing.append((target, problem))
                time.sleep(0.3)
            if not failing:
                break
        for target, problem in failing:
            sweeps[target.name].failed_at = rate
            sweeps[target.name].reason = problem
            active.remove(target)
    for target in active:
        sweeps[target.name].reason = f"at least: the sweep ends at {rates[-1]:g}/s"
    return sweeps


def verdict(
    outcome: Outcome,
    rate: float,
    seconds: float,
    base: Figures | None,
    figures: Figures,
    limit_ms: float,
) -> str | None:
    """Why a run does not count as sustained, or None."""
    if outcome.errors:
        return f"{outcome.errors} errors ({'; '.join(outcome.error_examples)})"
    expected = rate * seconds
    if outcome.sent < 0.9 * expected:
        return f"the client sent only {outcome.sent} of ~{expected:.0f}"
    if base is not None:
        added = figures.minus(base)
        worst = max(added.rt[1], added.ttft[1])
        if worst > limit_ms:
            return f"p99 added {worst:.1f} ms > {limit_ms:g} ms"
    return None


def progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def report(
    conc: dict[int, dict[str, tuple[Outcome, Figures]]],
    sweeps: dict[str, Sweep],
    probe_rate: float,
    limit_ms: float,
) -> dict[str, Any]:
    summary: dict[str, Any] = {"concurrency": {}, "sustained": {}}
    for level, runs in conc.items():
        base = runs["direct"][1]
        print(
            f"\n{level} concurrent streams held open (~"
            f"{runs['direct'][0].stream_events_per_s:,.0f} token events/s relayed), "
            f"probes {probe_rate:g}/s; latencies in ms"
        )
        print(
            f"{'target':<13}{'RT p50':>8}{'p99':>8}{'+p50':>8}{'+p99':>8}"
            f"{'TTFT p50':>10}{'p99':>8}{'+p50':>8}{'+p99':>8}{'streams':>9}{'ev/s':>8}"
            f"{'err':>5}  cpu (cores)"
        )
        for name, (outcome, figures) in runs.items():
            added = figures.minus(base)
            cpu = " ".join(f"{k}={v:.2f}" for k, v in outcome.cpu.items())
            errors = outcome.errors + outcome.stream_errors
            print(
                f"{name:<13}{fmt(figures.rt[0]):>8}{fmt(figures.rt[1]):>8}"
                f"{fmt(added.rt[0]):>8}{fmt(added.rt[1]):>8}"
                f"{fmt(figures.ttft[0]):>10}{fmt(figures.ttft[1]):>8}"
                f"{fmt(added.ttft[0]):>8}{fmt(added.ttft[1]):>8}"
                f"{outcome.streams_min_open:>9}{outcome.stream_events_per_s:>8.0f}"
                f"{errors:>5}  {cpu}"
            )
            summary["concurrency"].setdefault(str(level), {})[name] = {
                "rt_ms": figures.rt,
                "ttft_ms": figures.ttft,
                "added_rt_ms": added.rt,
                "added_ttft_ms": added.ttft,
                "samples": [len(outcome.rt_ms), len(outcome.ttft_ms)],
                "errors": errors,
                "cpu": outcome.cpu,
            }
    print(
        f"\nsustained rate: open-loop Poisson arrivals of the short requests (half streaming); "
        f"the last rate with no error and p99 added latency <= {limit_ms:g} ms"
    )
    for name, sweep in sweeps.items():
        cpu = " ".join(f"{k}={v:.2f}" for k, v in sweep.cpu_at_sustained.items())
        until = f"fails at {sweep.failed_at:g}/s: " if sweep.failed_at is not None else ""
        print(f"{name:<10}{sweep.sustained:>8g}/s  {until}{sweep.reason}  {cpu}".rstrip())
        summary["sustained"][name] = {
            "rate": sweep.sustained,
            "failed_at": sweep.failed_at,
            "reason": sweep.reason,
        }
    return summary


def ratios(
    conc: dict[int, dict[str, tuple[Outcome, Figures]]], sweeps: dict[str, Sweep]
) -> None:
    print()
    top = max(conc)
    if "tollgate" in conc[top]:
        added = conc[top]["tollgate"][1].minus(conc[top]["direct"][1])
        worst = max(added.rt[1], added.ttft[1])
        verdict_text = "met" if worst <= 5 else "NOT met"
        print(
            f"Tollgate added p99 at {top} streams: round trip {fmt(added.rt[1])} ms, "
            f"TTFT {fmt(added.ttft[1])} ms (target <= 5 ms): {verdict_text}"
        )
    tollgate = sweeps["tollgate"].sustained
    litellm = sweeps["litellm"].sustained
    nginx = sweeps["nginx"].sustained
    if litellm > 0:
        ratio = tollgate / litellm
        print(f"Tollgate rate / LiteLLM rate: {tollgate:g} / {litellm:g} = {ratio:.1f} "
              f"(target >= 3): {'met' if ratio >= 3 else 'NOT met'}")  # fmt: skip
    else:
        print(f"Tollgate rate / LiteLLM rate: LiteLLM sustained no rate tried (Tollgate {tollgate:g}/s)")
    if tollgate > 0:
        ratio = nginx / tollgate
        bound = " (nginx's figure is a lower bound)" if sweeps["nginx"].failed_at is None else ""
        print(f"nginx rate / Tollgate rate: {nginx:g} / {tollgate:g} = {ratio:.1f}{bound} "
              f"(target <= 3): {'met' if ratio <= 3 else 'NOT met'}")  # fmt: skip
    else:
        print("nginx rate / Tollgate rate: Tollgate sustained no rate tried")


# --- main ------------------------------------------------------------------------------------------


def cpu_layout(pin: bool) -> dict[str, set[int]]:
    cores = sorted(os.sched_getaffinity(0))
    if not pin or len(cores) < 2:
        return {}
    if len(cores) == 2:
        return {"loadgen": {cores[0]}, "upstream": {cores[0]}, "proxy": {cores[1]}}
    return {"loadgen": {cores[0]}, "upstream": {cores[1]}, "proxy": {cores[2]}}


@contextlib.contextmanager
def redis_database(url: str) -> Iterator[int | None]:
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        info = client.info("server")
        yield int(info["process_id"]) if info.get("process_id") else None
    finally:
        client.flushdb()
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter windows, coarser sweep")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/9")
    parser.add_argument("--streams", default="50,200", help="concurrency levels (held streams)")
    parser.add_argument("--probe-rate", type=float, default=100.0, help="probes/s at each level")
    parser.add_argument("--limit-ms", type=float, default=10.0, help="p99 added latency allowed")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--setup-only", action="store_true", help="install nginx and LiteLLM")
    args = parser.parse_args()
    nginx = ensure_nginx()
    litellm = ensure_litellm()
    if args.setup_only:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    started = time.monotonic()
    busy = machine_busy()
    print(f"machine: {os.cpu_count()} cores, {busy:.2f} busy before the bench started"
          + ("  (WARNING: other work running; figures will be distorted)" if busy > 0.2 else ""))  # fmt: skip
    layout = cpu_layout(not args.no_pin)
    if layout:
        print(f"pinning: load generator {sorted(layout['loadgen'])}, simfleet "
              f"{sorted(layout['upstream'])}, each proxy {sorted(layout['proxy'])}")  # fmt: skip
        os.sched_setaffinity(0, layout["loadgen"])  # keep the proxies' core free of this one
    levels = [int(x) for x in args.streams.split(",")]
    seconds = 4.0 if args.quick else 10.0
    rates: list[float] = (
        [25, 50, 100, 200, 300, 400, 600, 800, 1000, 1300, 1600, 2000, 2500, 3000]
        if args.quick
        else [25, 50, 75, 100, 150, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400,
              1600, 1800, 2000, 2400, 2800, 3200]
    )  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="gateway-overhead-") as tmp,
        redis_database(args.redis_url) as redis_pid,
    ):
        procs = Processes(Path(tmp), layout)
        try:
            targets = start_targets(procs, args.redis_url, nginx, litellm)
            sim_pid = procs.started[0][1].pid
            for target in targets:
                check_target(target)
            loadgen = LoadGenerator(layout.get("loadgen", set()))
            try:
                for target in targets:  # warm-up: connection pools, lazy imports, caches
                    job = Job(f"{target.base_url}/v1/chat/completions", target.headers, 50, 2, 20)
                    loadgen.run(job, {})
                conc = concurrency_phase(
                    loadgen, targets, levels, seconds, args.probe_rate, sim_pid, redis_pid
                )
                sweeps = rate_phase(
                    loadgen, targets, rates, args.limit_ms, args.quick, sim_pid, redis_pid
                )
            finally:
                loadgen.close()
        finally:
            procs.stop_all()
    summary = report(conc, sweeps, args.probe_rate, args.limit_ms)
    ratios(conc, sweeps)
    print(f"\n(bench took {time.monotonic() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
