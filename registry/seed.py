"""A demo model family with lineage, eval scores, aliases and gates (idempotent)."""

from __future__ import annotations

import hashlib
from typing import Any

from registry.choices import ArtifactFormat, EvalSource, Relation
from registry.evals import parse_score_list
from registry.models import EvalRun, LineageEdge, ModelArtifact
from registry.selectors import alias_target
from registry.services import (
    GateSpec,
    ParentLink,
    alias_move,
    artifact_register,
    eval_run_record,
    gates_set,
    lineage_add,
)

FAMILY = "support-chat"
# (family, version, format, parent version in the same list, relation, scores)
ARTIFACTS: list[tuple[str, str, str, str | None, Relation | None, dict[str, float]]] = [
    ("llama-3-1", "8b-instruct", ArtifactFormat.SAFETENSORS, None, None,
     {"arc_easy": 0.79, "gsm8k": 0.76, "support_qa": 0.52}),
    (FAMILY, "v1", ArtifactFormat.SAFETENSORS, "llama-3-1:8b-instruct", Relation.FINETUNE,
     {"arc_easy": 0.78, "gsm8k": 0.74, "support_qa": 0.71}),
    (FAMILY, "v2", ArtifactFormat.LORA_ADAPTER, "support-chat:v1", Relation.ADAPTER,
     {"arc_easy": 0.78, "gsm8k": 0.75, "support_qa": 0.76}),
    (FAMILY, "v2-awq", ArtifactFormat.SAFETENSORS, "support-chat:v2", Relation.QUANTIZED,
     {"arc_easy": 0.76, "gsm8k": 0.71, "support_qa": 0.74}),
]  # fmt: skip


def _scores(values: dict[str, float]) -> list[dict[str, Any]]:
    return [
        {"task": task, "metric": "acc", "value": value, "stderr": 0.009, "higher_is_better": True}
        for task, value in values.items()
    ]


def seed() -> dict[str, Any]:
    made: dict[str, ModelArtifact] = {}
    for family, version, fmt, parent, relation, values in ARTIFACTS:
        artifact, _ = artifact_register(
            actor=None,
            family=family,
            version=version,
            uri=f"s3://models/{family}/{version}",
            digest=hashlib.sha256(f"demo:{family}:{version}".encode()).hexdigest(),
            format=fmt,
            served_model_name="tiny",
        )
        made[f"{family}:{version}"] = artifact
        if parent and relation and not LineageEdge.objects.filter(child=artifact).exists():
            lineage_add(actor=None, child=artifact, links=[ParentLink(made[parent], relation)])
        if not EvalRun.objects.filter(artifact=artifact).exists():
            parsed = parse_score_list(_scores(values), suite="demo-evals")
            eval_run_record(actor=None, artifact=artifact, parsed=parsed, source=EvalSource.SCORES)
    v1, v2 = made[f"{FAMILY}:v1"], made[f"{FAMILY}:v2"]
    if alias_target(FAMILY, "production") is None:
        alias_move(actor=None, family=FAMILY, name="production", artifact=v1, reason="demo: GA")
    if alias_target(FAMILY, "candidate") is None:
        alias_move(actor=None, family=FAMILY, name="candidate", artifact=v2, reason="demo")
    gates_set(
        actor=None,
        family=FAMILY,
        gates=[
            GateSpec(task="support_qa", metric="acc", min_value=0.7),
            GateSpec(task="gsm8k", metric="acc", max_regression=0.02),
        ],
    )
    return {"family": FAMILY, "production": str(v1), "candidate": str(v2)}
