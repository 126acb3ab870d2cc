"""`tollgate artifact register` and `tollgate eval upload`: what a training pipeline reports.

Registering is idempotent on the server (the same family, version and digest again answers the
existing artifact), so a pipeline may run the step again after a failure further on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cli.context import Settings, note, pass_settings
from cli.errors import CliError
from cli.http import segment
from cli.params import ARTIFACT, KEY_VALUE, artifact_name

ARTIFACTS = "/api/v1/registry/artifacts"
# registry/choices.py ArtifactFormat and Relation.
FORMATS = ["safetensors", "gguf", "lora_adapter", "pytorch", "onnx", "other"]
RELATIONS = ["finetune", "adapter", "quantized", "merge", "distilled"]
# Hugging Face's card says `finetune`; people write it both ways.
RELATION_ALIASES = {"fine_tune": "finetune", "fine-tune": "finetune"}


def artifact_path(ref: tuple[str, str]) -> str:
    return f"{ARTIFACTS}/{segment(ref[0])}/{segment(ref[1])}"


def _parents(
    parents: tuple[tuple[str, str], ...], relations: tuple[str, ...]
) -> list[dict[str, str]]:
    """The lineage body: one relation for every parent, or one relation per parent in order."""
    if relations and not parents:
        raise click.UsageError("--relation needs --parent")
    if parents and not relations:
        raise click.UsageError("--parent needs --relation (how the artifact derives from it)")
    if len(relations) not in (1, len(parents)):
        raise click.UsageError("give one --relation for all parents, or one per --parent")
    if len(relations) == 1:
        relations = relations * len(parents)
    return [
        {"family": family, "version": version, "relation": RELATION_ALIASES.get(rel, rel)}
        for (family, version), rel in zip(parents, relations, strict=True)
    ]


@click.group("artifact")
def artifact_group() -> None:
    """Model artifacts in the registry."""


@artifact_group.command("register")
@click.argument("ref", metavar="FAMILY:VERSION", type=ARTIFACT)
@click.option("--uri", required=True, help="where it lives: a path, s3://…, hf://…")
@click.option("--digest", required=True, help="sha256:<hex> (or the bare hex) of its weights")
@click.option(
    "--format", "format_", type=click.Choice(FORMATS), default="safetensors", show_default=True
)
@click.option("--size-bytes", type=click.IntRange(min=0))
@click.option("--served-model-name", help="the name vLLM serves it as, if not the family's")
@click.option("--training-data-version")
@click.option("--code-revision", help="the training code's commit")
@click.option(
    "--metadata",
    "metadata",
    type=KEY_VALUE,
    multiple=True,
    help="KEY=VALUE, repeated; kept as text",
)
@click.option(
    "--parent",
    "parents",
    type=ARTIFACT,
    multiple=True,
    help="an artifact it derives from (registered first), repeated",
)
@click.option(
    "--relation",
    "relations",
    multiple=True,
    type=click.Choice([*RELATIONS, *RELATION_ALIASES]),
    help="how it derives from its parent(s): one for all, or one per --parent",
)
@pass_settings
def artifact_register(
    settings: Settings,
    ref: tuple[str, str],
    uri: str,
    digest: str,
    format_: str,
    size_bytes: int | None,
    served_model_name: str | None,
    training_data_version: str | None,
    code_revision: str | None,
    metadata: tuple[tuple[str, str], ...],
    parents: tuple[tuple[str, str], ...],
    relations: tuple[str, ...],
) -> None:
    """Register FAMILY:VERSION (and its parents); prints FAMILY:VERSION.

    Again with the same digest it answers the registered artifact (safe to rerun); with
    another digest it is an error.
    """
    lineage = _parents(parents, relations)  # checked before anything is written
    body: dict[str, Any] = {
        "family": ref[0],
        "version": ref[1],
        "uri": uri,
        "digest": digest,
        "format": format_,
    }
    optional = {
        "size_bytes": size_bytes,
        "served_model_name": served_model_name,
        "training_data_version": training_data_version,
        "code_revision": code_revision,
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    if metadata:
        body["metadata"] = dict(metadata)
    api = settings.api()
    artifact = api.post(ARTIFACTS, body)
    note(f"registered {artifact_name(ref)} ({artifact.get('digest')})")
    if lineage:
        api.post(f"{artifact_path(ref)}/lineage", {"parents": lineage})
        named = ", ".join(f"{p['relation']} of {p['family']}:{p['version']}" for p in lineage)
        note(f"  lineage: {named}")
    if settings.json_output:
        settings.print_json(artifact)
    else:
        click.echo(artifact_name(ref))


@click.group("eval")
def eval_group() -> None:
    """Evaluation results of artifacts."""


@eval_group.command("upload")
@click.argument(
    "results", metavar="RESULTS_JSON", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("--artifact", "ref", type=ARTIFACT, required=True, help="the artifact evaluated")
@click.option("--suite", help="a name for the run, when the file is a plain list of scores")
@pass_settings
def eval_upload(settings: Settings, results: Path, ref: tuple[str, str], suite: str | None) -> None:
    """Upload an lm-evaluation-harness results file (results_<timestamp>.json) as it is.

    Also takes a JSON list of {"task", "metric", "value", ...} scores (name it with --suite).
    """
    try:
        # Sent as written, byte for byte: lm-eval writes NaN, which a JSON round trip would lose
        # or refuse, and the server reads it leniently.
        body = results.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {results}: {exc.strerror}") from exc
    run = settings.api().request(
        "POST",
        f"{artifact_path(ref)}/evals",
        body=body,
        content_type="application/json",
        params={"suite": suite} if suite else None,
    )
    note(
        f"uploaded {run.get('scores')} scores for {artifact_name(ref)} "
        f"(suite {run.get('suite')!r}, eval run {run.get('run')})"
    )
    if settings.json_output:
        settings.print_json(run)
    else:
        click.echo(run.get("run"))
