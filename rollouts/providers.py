"""Getting a deployment onto its fleet's replicas, and knowing when it is really there.

Each fleet has a provider: `static` (the replicas already serve the model), `lora` (load the
adapter on every replica through vLLM's runtime LoRA API; unload after a rollback or once the
old version is drained) and `simfleet` (the same runtime API, on simulated replicas). A
deployment is ready only when every active replica answers a real inference for it.

Network calls only: callers keep them out of database transactions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import requests

from rollouts.choices import DeploymentKind, Provider, ReplicaState
from rollouts.models import Deployment, Replica

logger = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Probe:
    replica: Replica
    ok: bool
    detail: str


def probe(replica: Replica, served_model_name: str) -> Probe:
    """One real (tiny) inference: the replica is up, the model is loaded, and it generates."""
    try:
        response = requests.post(
            f"{replica.base_url.rstrip('/')}/v1/completions",
            json={"model": served_model_name, "prompt": "ping", "max_tokens": 1},
            timeout=PROBE_TIMEOUT_S,
        )
    except requests.RequestException as exc:
        return Probe(replica, False, f"{type(exc).__name__}: {exc}")
    if response.status_code != 200:
        return Probe(replica, False, f"HTTP {response.status_code}: {response.text[:200]}")
    return Probe(replica, True, "ok")


def active_replicas(deployment: Deployment) -> list[Replica]:
    return list(deployment.fleet.replicas.filter(state=ReplicaState.ACTIVE))


def _uses_runtime_lora(deployment: Deployment) -> bool:
    return deployment.kind == DeploymentKind.LORA and deployment.fleet.provider in (
        Provider.LORA,
        Provider.SIMFLEET,
    )


def prepare(deployment: Deployment) -> list[str]:
    """Loads what must be loaded; returns the problems (empty when every replica took it)."""
    if not _uses_runtime_lora(deployment):
        return []
    problems = []
    for replica in active_replicas(deployment):
        try:
            response = requests.post(
                f"{replica.base_url.rstrip('/')}/v1/load_lora_adapter",
                json={
                    "lora_name": deployment.served_model_name,
                    "lora_path": deployment.artifact.uri,
                },
                timeout=PROBE_TIMEOUT_S,
            )
        except requests.RequestException as exc:
            problems.append(f"{replica}: {exc}")
            continue
        already = response.status_code == 400 and "already been loaded" in response.text
        if response.status_code != 200 and not already:
            problems.append(f"{replica}: HTTP {response.status_code}: {response.text[:200]}")
    return problems


def is_ready(deployment: Deployment) -> tuple[bool, list[str]]:
    replicas = active_replicas(deployment)
    if not replicas:
        return False, ["no active replica in the fleet"]
    failed = [p for p in (probe(r, deployment.served_model_name) for r in replicas) if not p.ok]
    return not failed, [f"{p.replica}: {p.detail}" for p in failed]


def teardown(deployment: Deployment) -> None:
    """Unloads a LoRA adapter from every replica; best effort (a replica that is gone has
    nothing loaded)."""
    if not _uses_runtime_lora(deployment):
        return
    for replica in active_replicas(deployment):
        try:
            requests.post(
                f"{replica.base_url.rstrip('/')}/v1/unload_lora_adapter",
                json={"lora_name": deployment.served_model_name},
                timeout=PROBE_TIMEOUT_S,
            )
        except requests.RequestException as exc:
            logger.warning("could not unload %s from %s: %s", deployment, replica, exc)
