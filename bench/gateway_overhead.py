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
   arriving together, as vLLM sends them), and probes arrive on top (open loop, Poisson, 100/s,
   every other one streaming) for a model with a ~1 ms step and max_tokens=16 (ignore_eos):
   non-streaming round trip, and streaming TTFT (until the first chunk carrying content).
   "Added" is the target's percentile minus direct's under the same load. (Short requests back
   to back at that concurrency would be 5,000+ req/s: a throughput test that no single Python
   process passes, not a measure of overhead at that concurrency.)
2. The highest request rate each target sustains: open-loop Poisson arrivals of the short
   requests (half streaming), stepped up. A rate is sustained when nothing fails, all is answered
   and the p99 added latency (round trip and TTFT, against direct at the same rate and on the same
   arrival schedule) is at most 10 ms; a failing step is measured once more before it counts.
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
from collections.abc import Callable, Iterator, Sequence
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
FAST_MODEL = "bench"  # the probes: ~1 ms steps, so the upstream is never the bottleneck
STREAM_MODEL = "bench-streams"  # the held streams, paced like a loaded GPU
MAX_TOKENS = 16
STREAM_TOKENS = (60, 140)  # length of each held stream, drawn per stream
TENANT_KEY = "tk_bench_" + "0" * 24
BIG = 10**12  # a limit that is checked on every request and never reached
PROMPT = "Benchmark the gateway overhead, please."
CAPACITY_MS = 1000.0  # p99 added latency that still counts as keeping up, for capacity


# --- the upstream and the proxies' configurations ------------------------------------------------


def fleet_yaml(port: int) -> str:
    # Answers far longer than max_tokens: every answer is cut at max_tokens, whether or not a
    # proxy passes ignore_eos on.
    def profile(name: str, step_ms: float, per_seq_ms: float) -> dict[str, Any]:
        return {
            "name": name,
            "max_model_len": 4096,
            "kv_cache_tokens": 4_000_000,
            "max_num_seqs": 100_000,
            "speed": {
                "step_base_ms": step_ms,
                "decode_per_seq_ms": per_seq_ms,
                "prefill_per_token_ms": 0,
            },
            "output": {"distribution": "lognormal", "mean": 100000, "sigma": 0.0},
        }

    models = [profile(FAST_MODEL, 1.0, 0.005), profile(STREAM_MODEL, 40.0, 0.05)]
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
    models = (FAST_MODEL, STREAM_MODEL)
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
            for name in models
        },
        deployments={
            name: Deployment(
                id=name,
                served_model_name=name,
                replicas=(Replica(id=f"{name}-0", base_url=upstream),),
                # The gateway's in-flight shedding must not fire during the rate sweep.
                max_in_flight_per_replica=1_000_000,
            )
            for name in models
        },
    )


def nginx_conf(home: Path, port: int, upstream_port: int) -> str:
    temp = "".join(
        f"    {kind}_temp_path {home / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""daemon off;
worker_processes 1;
pid {home / "nginx.pid"};
error_log {home / "error.log"} warn;
events {{ worker_connections 16384; }}
http {{
    access_log off;
{temp}    upstream simfleet {{
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
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if found:
        return found
    apt = shutil.which("apt-get")
    if os.geteuid() != 0 or apt is None:
        raise SystemExit("nginx is missing: run `apt-get install -y nginx` as root, then again")
    print("installing nginx: apt-get install -y nginx", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([apt, "install", "-y", "nginx"], check=True, env=env, stdout=subprocess.DEVNULL)
    return shutil.which("nginx", path="/usr/sbin:/usr/bin") or "/usr/sbin/nginx"


def litellm_proxy_requirements(metadata: str) -> list[str]:
    """litellm[proxy]'s own requirements, less what the index cannot provide (LITELLM.md)."""
    wanted = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist: "):
            continue
        requirement = Requirement(line.removeprefix("Requires-Dist: "))
        marker = requirement.marker
        if marker is None or not marker.evaluate({"extra": "proxy"}):
            continue
        if marker.evaluate({"extra": ""}) or requirement.name == "litellm-proxy":
            continue  # a base requirement (comes with litellm), or not on the index at all
        if requirement.name in {"litellm-proxy-extras", "litellm-enterprise"}:
            wanted.append(requirement.name)  # pinned to .post1 builds the index lacks
            continue
        requirement.marker = None
        wanted.append(str(requirement))
    return wanted


def ensure_litellm() -> Path:
    binary = LITELLM_VENV / "bin" / "litellm"
    stamp = LITELLM_VENV / ".bench-installed"
    if binary.exists() and stamp.exists() and stamp.read_text().strip() == LITELLM_VERSION:
        return binary
    print(f"creating {LITELLM_VENV} with litellm=={LITELLM_VERSION} (minutes)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
    pip = [str(LITELLM_VENV / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [*pip, "download", "--no-deps", "-d", tmp, f"litellm=={LITELLM_VERSION}"], check=True
        )
        wheel = next(Path(tmp).glob("litellm-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            metadata = archive.read(f"litellm-{LITELLM_VERSION}.dist-info/METADATA").decode()
    extras = litellm_proxy_requirements(metadata)
    print(f"  pip install litellm=={LITELLM_VERSION} {' '.join(extras)}", file=sys.stderr)
    subprocess.run([*pip, "install", f"litellm=={LITELLM_VERSION}", *extras], check=True)
    stamp.write_text(LITELLM_VERSION + "\n")
    return binary


# --- processes and CPU accounting ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(
    method: str, url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    data = orjson.dumps(body) if body is not None else None
    request = urllib.request.Request(  # noqa: S310 -- local http URLs only
        url,
        data=data,
        method=method,
        headers={"content-type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU time of each process and its live descendants (nginx's worker, LiteLLM's threads)."""

    def stat(pid: int | str) -> list[str]:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                children.setdefault(int(stat(entry.name)[1]), []).append(int(entry.name))
    totals = {}
    for name, pid in pids.items():
        total, todo = 0, [pid]
        while todo:
            current = todo.pop()
            with contextlib.suppress(OSError, IndexError):
                fields = stat(current)
                total += int(fields[11]) + int(fields[12])
            todo.extend(children.get(current, ()))
        totals[name] = total / os.sysconf("SC_CLK_TCK")
    return totals


def machine_cpu_seconds() -> tuple[float, float]:
    """Busy and stolen CPU seconds of the whole machine.

    Busy is user + nice + system: interrupt time is not charged to processes, so it would read as
    other processes' work. Stolen is what the hypervisor gave other guests while we wanted to run.
    """
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    tick = os.sysconf("SC_CLK_TCK")
    return sum(values[:3]) / tick, values[7] / tick


@dataclass
class Target:
    name: str
    base_url: str
    headers: dict[str, str]
    start: Callable[[], subprocess.Popen[bytes]] | None = None  # None: direct
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/chat/completions"


class Processes:
    """What this bench started, each in its own session, stopped by its own process group."""

    def __init__(self, home: Path, layout: dict[str, set[int]], nice: int) -> None:
        self.home = home
        self.layout = layout
        self.nice = nice
        self.started: dict[str, subprocess.Popen[bytes]] = {}

    def start(
        self, name: str, argv: list[str], *, cpus: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        # The priority comes from this process (set in main), as does the environment.
        taskset = shutil.which("taskset")
        if self.layout and taskset:
            argv = [taskset, "-c", ",".join(map(str, sorted(self.layout[cpus]))), *argv]
        with (self.home / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started[name] = process
        return process

    def log_tail(self, name: str) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self, name: str) -> None:
        process = self.started.pop(name)
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)

    def stop_all(self) -> None:
        for name in reversed(list(self.started)):
            self.stop(name)

    def wait_until(self, name: str, check: Callable[[], bool], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.started[name].poll() is not None:
                raise SystemExit(f"{name} exited:\n{self.log_tail(name)}")
            with contextlib.suppress(OSError):
                if check():
                    return
            time.sleep(0.2)
        raise SystemExit(f"{name} did not come up in {seconds:g} s:\n{self.log_tail(name)}")


def start_targets(procs: Processes, redis_url: str, nginx: str, litellm: Path) -> list[Target]:
    home = procs.home
    sim_port, gw_port, ng_port, ll_port = (free_port() for _ in range(4))
    upstream = f"http://127.0.0.1:{sim_port}"
    (home / "fleet.yaml").write_text(fleet_yaml(sim_port))
    procs.start(
        "simfleet",
        [sys.executable, "-m", "simfleet", "--config", str(home / "fleet.yaml")],
        cpus="upstream",
    )
    procs.wait_until("simfleet", lambda: http("GET", f"{upstream}/health")[0] == 200, 30)

    def start_tollgate() -> subprocess.Popen[bytes]:
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
        process = procs.start("tollgate", [sys.executable, "-m", "gateway"], cpus="proxy", env=env)

        def applied() -> bool:
            status, body = http("GET", f"http://127.0.0.1:{gw_port}/readyz")
            return status == 200 and orjson.loads(body).get("snapshot_version") == snap.version

        procs.wait_until("tollgate", applied, 30)
        return process

    def start_nginx() -> subprocess.Popen[bytes]:
        ng_home = home / "nginx"
        ng_home.mkdir(exist_ok=True)
        conf = ng_home / "nginx.conf"
        conf.write_text(nginx_conf(ng_home, ng_port, sim_port))
        argv = [nginx, "-p", str(ng_home), "-c", str(conf), "-e", str(ng_home / "error.log")]
        process = procs.start("nginx", argv, cpus="proxy")
        url = f"http://127.0.0.1:{ng_port}/health"
        procs.wait_until("nginx", lambda: http("GET", url)[0] == 200, 30)
        return process

    master = "sk-" + secrets.token_hex(16)

    def start_litellm() -> subprocess.Popen[bytes]:
        (home / "litellm.yaml").write_text(litellm_yaml(upstream))
        env = {
            **os.environ,
            "LITELLM_MASTER_KEY": master,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "ERROR",
        }
        argv = [
            str(litellm),
            "--config",
            str(home / "litellm.yaml"),
            "--host",
            "127.0.0.1",
            "--port",
            str(ll_port),
            "--num_workers",
            "1",
        ]
        process = procs.start("litellm", argv, cpus="proxy", env=env)
        url = f"http://127.0.0.1:{ll_port}/health/liveliness"
        procs.wait_until("litellm", lambda: http("GET", url)[0] == 200, 90)
        return process

    targets = [
        Target("direct", upstream, {}),
        Target(
            "tollgate",
            f"http://127.0.0.1:{gw_port}",
            {"authorization": f"Bearer {TENANT_KEY}"},
            start_tollgate,
        ),
        Target("nginx", f"http://127.0.0.1:{ng_port}", {}, start_nginx),
        Target(
            "litellm",
            f"http://127.0.0.1:{ll_port}",
            {"authorization": f"Bearer {master}"},
            start_litellm,
        ),
    ]
    for target in targets:
        if target.start is not None:
            target.process = target.start()
    return targets


def check_target(target: Target) -> None:
    """One answer of each kind, read in full: the right length, content, the end of the stream."""
    status, body = http("POST", target.url, probe_body(stream=False), target.headers)
    if status != 200:
        raise SystemExit(f"{target.name}: HTTP {status}: {body[:300]!r}")
    answer = orjson.loads(body)
    if (
        answer["usage"]["completion_tokens"] != MAX_TOKENS
        or not answer["choices"][0]["message"]["content"]
    ):
        raise SystemExit(f"{target.name}: unexpected answer {body[:300]!r}")
    status, body = http("POST", target.url, probe_body(stream=True), target.headers)
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    content = sum(1 for e in events if has_content(e))
    if status != 200 or events[-1] != b"data: [DONE]" or content != MAX_TOKENS:
        raise SystemExit(f"{target.name}: unexpected stream ({content} tokens): {body[-300:]!r}")


# --- the load generator (its own process) --------------------------------------------------------


@dataclass(frozen=True)
class Job:
    url: str
    headers: dict[str, str]
    rate: float  # probe arrivals per second (Poisson); every other probe streams
    seconds: float  # the measured window
    streams: int = 0  # streams held open through the target meanwhile
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
    cpu: dict[str, float] = field(default_factory=dict)  # cores; filled in by the parent
    other_cores: float = 0.0  # everything else on the machine meanwhile
    steal_cores: float = 0.0  # taken by the hypervisor meanwhile
    disturbed: bool = False  # others used more than the limit


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
        self.headers = {"content-type": "application/json", **job.headers}
        self.plain = orjson.dumps(probe_body(stream=False))
        self.streaming = orjson.dumps(probe_body(stream=True))
        self.open_streams = 0
        self.stream_events = 0

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
        await asyncio.sleep(index * 0.005)  # spread the starts
        while True:
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
                        await response.read()
                        raise aiohttp.ClientError(f"HTTP {response.status}")
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
            deadline = time.perf_counter() + 30
            while self.open_streams < job.streams and time.perf_counter() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # every stream open; a moment for the starts to spread
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
            task = asyncio.create_task(self.stream_probe() if out.sent % 2 else self.plain_probe())
            probes.add(task)
            task.add_done_callback(probes.discard)
            out.sent += 1
        out.stream_events_per_s = (self.stream_events - events_before) / job.seconds
        sampler.cancel()
        if probes:
            _, late = await asyncio.wait(set(probes), timeout=10)
            for task in late:
                task.cancel()
                self._error("no answer within 10 s of the window's end")
        for task in holders:
            task.cancel()
        await asyncio.gather(*probes, *holders, sampler, return_exceptions=True)
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
        return await Load(session, job).run()


def load_generator(conn: Connection, cpus: set[int], nice: int) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    while (job := conn.recv()) is not None:
        conn.send(uvloop.run(run_job(job)))


# --- running the bench ---------------------------------------------------------------------------


class Bench:
    def __init__(self, procs: Processes, targets: list[Target], redis_pid: int | None) -> None:
        self.procs = procs
        self.targets = targets
        self.upstream = targets[0].base_url
        self._conn, child = multiprocessing.Pipe()
        cpus = procs.layout.get("loadgen", set())
        self.loadgen = multiprocessing.Process(
            target=load_generator, args=(child, cpus, procs.nice), daemon=True
        )
        self.loadgen.start()
        self.redis_pid = redis_pid
        self.noisy = False
        self.others_limit = 0.4  # cores used by other processes that disturb a run

    def close(self) -> None:
        self._conn.send(None)
        self.loadgen.join(timeout=10)

    def ours(self) -> dict[str, int]:
        pids = {"main": os.getpid(), "loadgen": self.loadgen.pid or 0}
        pids |= {name: p.pid for name, p in self.procs.started.items()}
        if self.redis_pid:
            pids["redis"] = self.redis_pid
        return pids

    def _upstream_busy(self) -> int:
        _, body = http("GET", f"{self.upstream}/metrics")
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in body.decode().splitlines()
            if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{"))
        )

    def settle(self) -> None:
        """Until simfleet runs nothing and every proxy is idle; one busy for 10 s is restarted."""
        deadline = time.monotonic() + 10
        while True:
            pids = {t.name: t.process.pid for t in self.targets if t.process is not None}
            pids["simfleet"] = self.procs.started["simfleet"].pid
            before = cpu_seconds(pids)
            time.sleep(0.3)
            busy = {k: (v - before[k]) / 0.3 for k, v in cpu_seconds(pids).items()}
            if self._upstream_busy() == 0 and max(busy.values()) < 0.05:
                return
            if time.monotonic() > deadline:
                break
        restarted = False
        for target in self.targets:
            if target.start is not None and busy.get(target.name, 0.0) >= 0.05:
                progress(f"{target.name} still busy after 10 s (its backlog): restarting it")
                self.procs.stop(target.name)
                target.process = target.start()
                restarted = True
        if not restarted:
            raise SystemExit("simfleet never went idle")
        self.settle()

    def quiet(self) -> None:
        """Until the rest of the machine is under the limit: 20 s at most, 5 s while noisy."""
        deadline = time.monotonic() + (5 if self.noisy else 20)
        while time.monotonic() < deadline:
            other = self._other_cores(0.5)
            if other < self.others_limit:
                self.noisy = False
                return
        if not self.noisy:
            progress(f"the machine is not quiet ({other:.2f} cores used by others): going on")
        self.noisy = True

    def _other_cores(self, seconds: float) -> float:
        pids = self.ours()
        machine, ours = machine_cpu_seconds()[0], sum(cpu_seconds(pids).values())
        time.sleep(seconds)
        machine = machine_cpu_seconds()[0] - machine
        ours = sum(cpu_seconds(pids).values()) - ours
        return max(0.0, (machine - ours) / seconds)

    def run(self, target: Target, job: Job) -> Outcome:
        """One measured run, repeated once when other work on the machine disturbed it."""
        kept: Outcome | None = None
        for _ in range(2):
            self.settle()
            self.quiet()
            outcome = self._run_once(target, job)
            outcome.disturbed = outcome.other_cores > self.others_limit
            if kept is None or outcome.other_cores < kept.other_cores:
                kept = outcome
            if not kept.disturbed:
                break
            progress(f"{target.name}: others used {outcome.other_cores:.2f} cores: again")
        assert kept is not None
        return kept

    def _run_once(self, target: Target, job: Job) -> Outcome:
        pids = self.ours()
        watch = {"loadgen": "loadgen", "simfleet": "simfleet"}  # shown as: process
        if target.process is not None:
            watch["proxy"] = target.name
        if target.name == "tollgate" and "redis" in pids:
            watch["redis"] = "redis"
        before, (busy, stolen) = cpu_seconds(pids), machine_cpu_seconds()
        started = time.monotonic()
        self._conn.send(job)
        outcome: Outcome = self._conn.recv()
        elapsed = time.monotonic() - started
        after, (busy_after, stolen_after) = cpu_seconds(pids), machine_cpu_seconds()
        used = {k: after[k] - before.get(k, after[k]) for k in after}
        outcome.cpu = {label: round(used[name] / elapsed, 2) for label, name in watch.items()}
        outcome.other_cores = max(0.0, (busy_after - busy - sum(used.values())) / elapsed)
        outcome.steal_cores = (stolen_after - stolen) / elapsed
        return outcome


def progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Figures:
    rt: tuple[float, float]  # p50, p99 in ms
    ttft: tuple[float, float]

    @classmethod
    def of(cls, outcome: Outcome) -> Figures:
        def pair(values: list[float]) -> tuple[float, float]:
            return percentile(values, 0.5), percentile(values, 0.99)

        return cls(rt=pair(outcome.rt_ms), ttft=pair(outcome.ttft_ms))

    def minus(self, other: Figures) -> Figures:
        return Figures(
            rt=(self.rt[0] - other.rt[0], self.rt[1] - other.rt[1]),
            ttft=(self.ttft[0] - other.ttft[0], self.ttft[1] - other.ttft[1]),
        )

    @property
    def worst_p99(self) -> float:
        return max(self.rt[1], self.ttft[1])


def fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


Level = dict[str, tuple[Outcome, Figures]]


def concurrency_phase(
    bench: Bench, levels: list[int], seconds: float, probe_rate: float
) -> dict[int, Level]:
    direct, tollgate, nginx, litellm = bench.targets
    # Direct once more before LiteLLM (whose overload would disturb what follows): the gap
    # between the two direct runs is the noise floor.
    order = [
        (direct, "direct"),
        (tollgate, "tollgate"),
        (nginx, "nginx"),
        (direct, "direct-again"),
        (litellm, "litellm"),
    ]
    results: dict[int, Level] = {}
    for level in levels:
        results[level] = {}
        for target, label in order:
            job = Job(target.url, target.headers, probe_rate, seconds, level, seed=level)
            outcome = bench.run(target, job)
            figures = Figures.of(outcome)
            results[level][label] = (outcome, figures)
            progress(
                f"{level} streams, {label}: RT p50/p99 {fmt(figures.rt[0])}/{fmt(figures.rt[1])} "
                f"ms, TTFT {fmt(figures.ttft[0])}/{fmt(figures.ttft[1])} ms, open streams >= "
                f"{outcome.streams_min_open}, errors {outcome.errors}, cpu {outcome.cpu}, "
                f"others {outcome.other_cores:.2f}, steal {outcome.steal_cores:.2f}"
            )
    return results


@dataclass
class Sweep:
    sustained: float = 0.0  # the last rate with p99 added <= the limit
    capacity: float = 0.0  # the last rate answered in full with p99 added < CAPACITY_MS
    strict_end: str = ""  # why the latency limit failed (empty while it holds)
    capacity_end: str = ""
    cpu: dict[str, float] = field(default_factory=dict)  # at the sustained rate


def sweep_window(rate: float, quick: bool) -> float:
    # Enough samples for a p99 at the rates that matter, without minutes at the lowest ones.
    return min(3.0 if quick else 5.0, max(1.5 if quick else 2.0, (300 if quick else 500) / rate))


def rate_phase(bench: Bench, rates: list[float], limit_ms: float, quick: bool) -> dict[str, Sweep]:
    direct, *proxies = bench.targets
    sweeps = {t.name: Sweep() for t in bench.targets}
    active = list(proxies)  # until over capacity
    reference: list[float] = []  # direct's p50 round trip at the first rate

    def measure(target: Target, rate: float) -> tuple[Outcome, Figures]:
        job = Job(target.url, target.headers, rate, sweep_window(rate, quick), seed=int(rate))
        outcome = bench.run(target, job)
        return outcome, Figures.of(outcome)

    def direct_at(rate: float) -> Figures | None:
        problem: str | None = None
        for _ in range(2):  # once more before calling the bench itself saturated
            outcome, figures = measure(direct, rate)
            reference[:] = reference or [figures.rt[0]]
            problem = failure(outcome, None, math.inf)
            if problem is None and figures.rt[0] - reference[0] > 5:
                problem = f"its p50 round trip rose {figures.rt[0] - reference[0]:.1f} ms"
            progress(
                f"{rate:g}/s direct: RT p50/p99 {fmt(figures.rt[0])}/{fmt(figures.rt[1])} ms, "
                f"TTFT p99 {fmt(figures.ttft[1])} ms, {problem or 'ok'}, cpu {outcome.cpu}"
            )
            if problem is None:
                sweeps[direct.name].sustained = sweeps[direct.name].capacity = rate
                return figures
        sweeps[direct.name].strict_end = f"saturates at {rate:g}/s: {problem}"
        return None

    def attempt(target: Target, rate: float, base: Figures) -> tuple[str | None, str | None]:
        """Why this rate fails the latency limit, and capacity (None: it passes)."""
        outcome, figures = measure(target, rate)
        added = figures.minus(base)
        strict = failure(outcome, added, limit_ms)
        loose = failure(outcome, added, CAPACITY_MS)
        progress(
            f"{rate:g}/s {target.name}: added p99 RT {fmt(added.rt[1])} ms, TTFT "
            f"{fmt(added.ttft[1])} ms, {strict or 'ok'}, cpu {outcome.cpu}"
        )
        sweep = sweeps[target.name]
        if strict is None and not sweep.strict_end:
            sweep.sustained, sweep.cpu = rate, outcome.cpu
        if loose is None:
            sweep.capacity = rate
        return strict, loose

    def bench_limit(rate: float, why: str) -> None:
        for target in active:
            sweep = sweeps[target.name]
            sweep.strict_end = sweep.strict_end or f"at least: {why}"
            sweep.capacity_end = sweep.capacity_end or f"at least: {why}"

    for rate in rates:
        if not active:
            break
        base = direct_at(rate)
        if base is None:
            bench_limit(rate, f"direct saturates at {rate:g}/s")
            break
        first = {t.name: attempt(t, rate, base) for t in active}
        doubtful = [
            t
            for t in active
            if first[t.name][1] is not None
            or (first[t.name][0] is not None and not sweeps[t.name].strict_end)
        ]
        if not doubtful:
            continue
        # A failing step is measured once more, against a fresh direct run, before it counts.
        base = direct_at(rate)
        if base is None:
            bench_limit(rate, f"direct saturates at {rate:g}/s")
            break
        for target in doubtful:
            again = attempt(target, rate, base)
            sweep = sweeps[target.name]
            strict = again[0] if first[target.name][0] is not None else None
            loose = again[1] if first[target.name][1] is not None else None
            if strict is not None and not sweep.strict_end:
                sweep.strict_end = f"fails at {rate:g}/s: {strict}"
            if loose is not None:
                sweep.capacity_end = f"fails at {rate:g}/s: {loose}"
                sweep.strict_end = sweep.strict_end or sweep.capacity_end
                active.remove(target)
    else:
        bench_limit(rates[-1], f"the sweep ends at {rates[-1]:g}/s")
    return sweeps


def failure(outcome: Outcome, added: Figures | None, limit_ms: float) -> str | None:
    """Why a run does not count at this limit, or None."""
    if outcome.errors:
        return f"{outcome.errors} errors ({'; '.join(outcome.error_examples)})"
    if outcome.max_lag_ms > 50:
        return f"the client fell {outcome.max_lag_ms:.0f} ms behind its schedule"
    if added is not None and added.worst_p99 > limit_ms:
        return f"p99 added {added.worst_p99:.1f} ms > {limit_ms:g} ms"
    return None


# --- the report ----------------------------------------------------------------------------------


def report_concurrency(conc: dict[int, Level], probe_rate: float) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for level, runs in conc.items():
        base = runs["direct"][1]
        events = runs["direct"][0].stream_events_per_s
        print(
            f"\n{level} concurrent streams held open (~{events:,.0f} token events/s), probes "
            f"{probe_rate:g}/s; ms; + is added over direct; ~ marks a disturbed run"
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
    added = conc[top]["tollgate"][1].minus(conc[top]["direct"][1])
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


# --- main ----------------------------------------------------------------------------------------


def cpu_layout(pin: bool) -> dict[str, set[int]]:
    cores = sorted(os.sched_getaffinity(0))
    if not pin or len(cores) < 2:
        return {}
    if len(cores) == 2:
        return {"loadgen": {cores[0]}, "upstream": {cores[0]}, "proxy": {cores[1]}}
    return {"loadgen": {cores[0]}, "upstream": {cores[1]}, "proxy": {cores[2]}}


@contextlib.contextmanager
def redis_server(procs: Processes, url: str | None) -> Iterator[tuple[str, int | None]]:
    """The gateway's Redis: a private server on the proxy's core, or a flushed database of `url`.

    Yields the URL and, for an external server, its process id (for its CPU use)."""
    if url is None:
        binary = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin")
        if binary is None:
            raise SystemExit("redis-server is missing: apt-get install -y redis-server")
        port = free_port()
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(procs.home)]  # fmt: skip
        procs.start("redis", argv, cpus="proxy")
        url = f"redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(url)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        procs.wait_until("redis", answers, 10)
        client.close()
        yield url, None
        return
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        pid = client.info("server").get("process_id")
        yield url, int(pid) if pid else None
    finally:
        client.flushdb()
        client.close()


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
        [5, 10, 20, 50, 100, 150, 200, 300, 400, 600, 800, 1000, 1500, 2000, 3000]
        if args.quick
        else [5, 10, 20, 30, 50, 75, 100, 125, 150, 200, 250, 300, 400, 600, 800, 1000, 1250,
              1500, 2000, 3000]
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
                    seconds = 4.0 if args.quick else 8.0
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
