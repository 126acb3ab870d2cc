"""Real simfleet processes for tests, and small clients for what the openai SDK cannot reach.

Every fleet is `python -m simfleet --config <yaml>` on free ports, exactly as people run it, so
the tests see what a client, the gateway and Prometheus see. Starting one takes about half a
second; modules that only read share one fleet, tests that change faults or kill the engine
start their own (or reset the faults when they are done).
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import orjson
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.conftest import ROOT, free_port

# Milliseconds per engine step: fast enough that a test waits on its own logic, not on the model.
FAST_SPEED = {"step_base_ms": 0.5, "decode_per_seq_ms": 0.02, "prefill_per_token_ms": 0.005}


def model(name: str = "tiny", **overrides: Any) -> dict[str, Any]:
    """A model profile for the fleet YAML: fast, and every answer exactly `answer_tokens` long.

    A lognormal with sigma 0 is a fixed length, which makes `stop` and `length` predictable.
    """
    answer_tokens = overrides.pop("answer_tokens", 4)
    profile: dict[str, Any] = {
        "name": name,
        "max_model_len": 1024,
        "kv_cache_tokens": 32768,
        "speed": FAST_SPEED,
        "output": {"distribution": "lognormal", "mean": answer_tokens, "sigma": 0.0},
    }
    profile.update(overrides)
    return profile


# --- plain HTTP -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return orjson.loads(self.body)


def request(
    method: str,
    url: str,
    payload: Any = None,
    *,
    raw: bytes | None = None,
    timeout: float = 10.0,
) -> Reply:
    """One HTTP request on its own connection (closed before returning)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    body = raw if raw is not None else (None if payload is None else orjson.dumps(payload))
    headers = {"content-type": "application/json"} if body is not None else {}
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return Reply(response.status, response.read(), dict(response.getheaders()))
    finally:
        connection.close()


def healthy(url: str) -> bool:
    try:
        return request("GET", f"{url}/health", timeout=1.0).status == 200
    except OSError:
        return False


def scrape(url: str) -> list[Sample]:
    text = request("GET", f"{url}/metrics").body.decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def metric(url: str, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels`."""
    return sum(
        sample.value
        for sample in scrape(url)
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def wait_until(check: Callable[[], bool], seconds: float = 5.0, every: float = 0.02) -> float:
    """Polls until `check` holds; returns how long that took."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if check():
            return time.monotonic() - start
        time.sleep(every)
    raise AssertionError(f"condition not met within {seconds} s")


# --- fleets ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fleet:
    urls: list[str]
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return self.urls[0]

    def client(self, replica: int = 0, timeout: float = 10.0) -> openai.OpenAI:
        """An SDK client that does not retry: every answer the tests see is simfleet's own."""
        return openai.OpenAI(
            base_url=f"{self.urls[replica]}/v1", api_key="unused", max_retries=0, timeout=timeout
        )

    def async_client(self, replica: int = 0, timeout: float = 10.0) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.urls[replica]}/v1", api_key="unused", max_retries=0, timeout=timeout
        )

    def reset_faults(self) -> None:
        for url in self.urls:
            assert request("DELETE", f"{url}/admin/faults").status == 200


class FleetLauncher:
    """Starts simfleet processes from fleet descriptions and stops every one of them."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.fleets: list[Fleet] = []

    def start(
        self,
        models: list[dict[str, Any]],
        *,
        replicas: int = 1,
        faults: dict[str, Any] | None = None,
        seed: int = 0,
    ) -> Fleet:
        index = len(self.fleets)
        ports = [free_port() for _ in range(replicas)]
        specs = [
            {"port": port, "models": models, **({"faults": faults} if faults else {})}
            for port in ports
        ]
        config = self.home / f"fleet-{index}.yaml"
        config.write_text(yaml.safe_dump({"seed": seed, "replicas": specs}))
        log = self.home / f"fleet-{index}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "simfleet", "--config", str(config)],
                cwd=ROOT,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        fleet = Fleet([f"http://127.0.0.1:{port}" for port in ports], process, log)
        self.fleets.append(fleet)
        deadline = time.monotonic() + 15
        while not all(healthy(url) for url in fleet.urls):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"simfleet did not come up:\n{log.read_text()}")
            time.sleep(0.05)
        return fleet

    def stop_all(self) -> None:
        for fleet in self.fleets:
            stop(fleet.process)
        self.fleets.clear()


def stop(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM, then SIGKILL if it lingers; always reaps the process."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
