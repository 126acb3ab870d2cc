"""The gateway overhead bench's processes: starting and checking the targets, their CPU use, the
CPU layout, and Tollgate's private Redis."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import redis
from overhead_load import has_content, probe_body
from overhead_setup import (
    MAX_TOKENS,
    ROOT,
    TENANT_KEY,
    fleet_yaml,
    gateway_env,
    litellm_yaml,
    nginx_conf,
    publish_snapshot,
    snapshot,
)

# Found through overhead_setup, imported above, which puts the repository root on sys.path.

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


def start_nginx_proxy(
    procs: Processes, nginx: str, port: int, upstream_port: int
) -> subprocess.Popen[bytes]:
    """nginx as a plain reverse proxy on `port` (overhead_setup.nginx_conf), once it answers."""
    home = procs.home / "nginx"
    home.mkdir(exist_ok=True)
    conf = home / "nginx.conf"
    conf.write_text(nginx_conf(home, port, upstream_port))
    argv = [nginx, "-p", str(home), "-c", str(conf), "-e", str(home / "error.log")]
    process = procs.start("nginx", argv, cpus="proxy")
    url = f"http://127.0.0.1:{port}/health"
    procs.wait_until("nginx", lambda: http("GET", url)[0] == 200, 30)
    return process


def start_targets(procs: Processes, redis_url: str, nginx: str, litellm: Path) -> list[Target]:
    home = procs.home
    sim_port, gw_port, gw_metrics_port, ng_port, ll_port = (free_port() for _ in range(5))
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
        publish_snapshot(redis_url, snap)
        env = gateway_env(redis_url, gw_port, gw_metrics_port)
        process = procs.start("tollgate", [sys.executable, "-m", "gateway"], cpus="proxy", env=env)

        def applied() -> bool:
            status, body = http("GET", f"http://127.0.0.1:{gw_port}/readyz")
            return status == 200 and orjson.loads(body).get("snapshot_version") == snap.version

        procs.wait_until("tollgate", applied, 30)
        return process

    def start_nginx() -> subprocess.Popen[bytes]:
        return start_nginx_proxy(procs, nginx, ng_port, sim_port)

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


# --- the CPU layout and Tollgate's Redis ----------------------------------------------------------


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
