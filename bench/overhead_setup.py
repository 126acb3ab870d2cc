"""The gateway overhead bench's constants, the upstream's and proxies' configurations, and
installing nginx and LiteLLM (see gateway_overhead.py)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import redis
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
# Run as a script: the gateway's snapshot schema is imported below (and in overhead_targets).
sys.path.insert(0, str(ROOT))

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


def snapshot(
    upstream: str,
    models: tuple[str, ...] = (FAST_MODEL, STREAM_MODEL),
    max_model_len: int | None = None,
) -> Snapshot:
    """One tenant whose budget sets every limit (never reached), one route per model served."""
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
                max_model_len=max_model_len,
                # The gateway's in-flight shedding must not fire during the rate sweep.
                max_in_flight_per_replica=1_000_000,
            )
            for name in models
        },
    )


def publish_snapshot(redis_url: str, snap: Snapshot) -> None:
    """Puts a snapshot where the bench's gateway reads it, and announces it."""
    client = redis.Redis.from_url(redis_url)
    client.set(SNAPSHOT_KEY, snap.model_dump_json())
    client.publish(CHANGED_CHANNEL, str(snap.version))
    client.close()


def gateway_env(redis_url: str, port: int, metrics_port: int) -> dict[str, str]:
    """The bench gateway's environment: one worker, a quick snapshot poll, a bounded samples
    stream, and no multiprocess metrics directory inherited from the caller."""
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "GATEWAY_PORT": str(port),
        "GATEWAY_METRICS_PORT": str(metrics_port),
        "GATEWAY_WORKERS": "1",
        "GATEWAY_SNAPSHOT_POLL_S": "1",
        "GATEWAY_SAMPLES_MAX_LEN": "100000",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return env


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
