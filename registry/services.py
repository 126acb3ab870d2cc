"""All writes to the registry: artifacts, lineage, eval results, aliases and promotion gates."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml
from django.db import IntegrityError, connection, transaction

from core.audit import audit_record
from core.errors import Conflict, DomainError, NotFound, PermissionDenied
from registry.choices import EvalSource, Relation
from registry.evals import ParsedRun
from registry.models import (
    Alias,
    AliasMove,
    EvalRun,
    EvalScore,
    GateOverride,
    LineageEdge,
    ModelArtifact,
    PromotionGate,
)
from registry.selectors import ancestor_ids, gates_check
from tenants.models import User

DIGEST = re.compile(r"^(?:sha256:)?([0-9a-fA-F]{64})$")
# Versions appear in URLs and file names: plain characters only.
VERSION = re.compile(r"^[A-Za-z0-9._+-]{1,100}$")
# Lineage writes take this transaction-level lock: two edges added at once could otherwise each
# pass the cycle check and close a cycle together.
LINEAGE_LOCK = 0x7011_6A7E


def normalize_digest(digest: str) -> str:
    match = DIGEST.match(digest.strip())
    if match is None:
        raise DomainError(
            "digest must be a sha256: 64 hex characters, optionally prefixed by 'sha256:'"
        )
    return match.group(1).lower()


def artifact_register(
    *,
    actor: User | None,
    family: str,
    version: str,
    uri: str,
    digest: str,
    format: str,
    size_bytes: int | None = None,
    served_model_name: str = "",
    training_data_version: str = "",
    code_revision: str = "",
    metadata: dict[str, Any] | None = None,
) -> tuple[ModelArtifact, bool]:
    """Register a version; (artifact, created). Registering the same family, version and digest
    again returns the existing artifact (CI retries); another digest is a conflict."""
    digest = normalize_digest(digest)
    if not VERSION.match(version):
        raise DomainError(
            f"version {version!r}: use letters, digits and . _ + - only (at most 100)"
        )
    existing = ModelArtifact.objects.filter(family=family, version=version).first()
    if existing is not None:
        if existing.digest != digest:
            raise Conflict(
                f"{family}:{version} is already registered with digest {existing.digest}; "
                "a version's content cannot change: register a new version instead"
            )
        return existing, False
    artifact = ModelArtifact(
        family=family,
        version=version,
        uri=uri,
        digest=digest,
        format=format,
        size_bytes=size_bytes,
        served_model_name=served_model_name,
        training_data_version=training_data_version,
        code_revision=code_revision,
        metadata=metadata or {},
        created_by=actor,
    )
    artifact.full_clean(validate_constraints=False)
    try:
        with transaction.atomic():
            artifact.save()
            audit_record(
                actor=actor,
                action="artifact.registered",
                target=artifact,
                data={"family": family, "version": version, "digest": digest},
            )
    except IntegrityError:
        # A concurrent registration of the same version won the race: answer as a retry would.
        return artifact_register(
            actor=actor, family=family, version=version, uri=uri, digest=digest, format=format
        )
    return artifact, True


def artifact_get(*, family: str, version: str) -> ModelArtifact:
    artifact = ModelArtifact.objects.filter(family=family, version=version).first()
    if artifact is None:
        raise NotFound(f"no artifact {family}:{version} is registered")
    return artifact


@dataclass(frozen=True)
class ParentLink:
    parent: ModelArtifact
    relation: Relation


def lineage_add(
    *, actor: User | None, child: ModelArtifact, links: list[ParentLink]
) -> list[LineageEdge]:
    """Adds parent edges in one transaction; a cycle anywhere rejects all of them."""
    if not links:
        raise DomainError("name at least one parent")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LINEAGE_LOCK])
        edges = []
        for link in links:
            if link.parent.pk == child.pk:
                raise DomainError(f"{child} cannot be its own parent")
            if child.pk in ancestor_ids(link.parent):
                raise DomainError(
                    f"{link.parent} descends from {child}: making it a parent would close a cycle"
                )
            edge, created = LineageEdge.objects.get_or_create(
                child=child, parent=link.parent, defaults={"relation": link.relation}
            )
            if not created and edge.relation != link.relation:
                raise Conflict(
                    f"{child} already derives from {link.parent} as {edge.relation}, "
                    f"not {link.relation}"
                )
            edges.append(edge)
        audit_record(
            actor=actor,
            action="lineage.added",
            target=child,
            data={"parents": [[str(l.parent), l.relation] for l in links]},  # noqa: E741
        )
    return edges


FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)", re.DOTALL)


def parse_model_card(card: str) -> tuple[list[str], Relation]:
    """The `base_model` (one or a list) and `base_model_relation` of a model card's front matter."""
    match = FRONT_MATTER.match(card)
    if match is None:
        raise DomainError("the model card has no YAML front matter (between --- lines)")
    try:
        meta = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as exc:
        raise DomainError(f"the model card's front matter is not valid YAML: {exc}") from exc
    if not isinstance(meta, dict):
        raise DomainError("the model card's front matter must be a mapping")
    bases = meta.get("base_model")
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not bases or not all(isinstance(b, str) for b in bases):
        raise DomainError("base_model: expected a model id or a list of model ids")
    relation = meta.get("base_model_relation", "finetune")
    if relation not in Relation.values:
        raise DomainError(
            f"base_model_relation: {relation!r} is not one of {', '.join(Relation.values)}"
        )
    return bases, Relation(relation)


def resolve_model_reference(reference: str) -> ModelArtifact:
    """`family:version`, or a Hugging Face id matched against artifacts registered as hf://…"""
    family, sep, version = reference.partition(":")
    if sep and "/" not in family:
        found = ModelArtifact.objects.filter(family=family, version=version).first()
    else:
        found = (
            ModelArtifact.objects.filter(uri__in=[f"hf://{reference}", reference])
            .order_by("-created_at")
            .first()
        )
    if found is None:
        raise DomainError(
            f"unknown parent {reference!r}: register it first (as family:version, or with "
            f"uri hf://{reference})"
        )
    return found


def lineage_import_model_card(
    *, actor: User | None, child: ModelArtifact, card: str
) -> list[LineageEdge]:
    bases, relation = parse_model_card(card)
    links = [ParentLink(resolve_model_reference(base), relation) for base in bases]
    return lineage_add(actor=actor, child=child, links=links)


def eval_run_record(
    *, actor: User | None, artifact: ModelArtifact, parsed: ParsedRun, source: EvalSource
) -> EvalRun:
    """Stores a parsed run and its scores in one transaction: all of it or nothing."""
    with transaction.atomic():
        run = EvalRun.objects.create(
            artifact=artifact,
            source=source,
            suite=parsed.suite,
            harness_version=parsed.harness_version,
            evaluated_at=parsed.evaluated_at,
            git_hash=parsed.git_hash,
            dataset_versions=parsed.dataset_versions,
            n_shot=parsed.n_shot,
            config=parsed.config,
            uploaded_by=actor,
        )
        seen: set[tuple[str, str, str]] = set()
        rows = []
        for score in parsed.scores:
            key = (score.task, score.metric, score.filter)
            if key in seen:
                raise DomainError(f"{score.task}/{score.metric},{score.filter} appears twice")
            seen.add(key)
            rows.append(
                EvalScore(
                    run=run,
                    task=score.task,
                    metric=score.metric,
                    filter=score.filter,
                    value=score.value,
                    stderr=score.stderr,
                    higher_is_better=score.higher_is_better,
                    n_shot=score.n_shot,
                    raw=score.raw,
                )
            )
        EvalScore.objects.bulk_create(rows)
        audit_record(
            actor=actor,
            action="evals.uploaded",
            target=artifact,
            data={"run": run.pk, "suite": parsed.suite, "scores": len(rows)},
        )
    return run


_ANY = object()


def alias_move(
    *,
    actor: User | None,
    family: str,
    name: str,
    artifact: ModelArtifact,
    reason: str,
    expected_from: ModelArtifact | object | None = _ANY,
) -> Alias:
    """Points `family@name` at `artifact`; a move to where it already points changes nothing.

    `expected_from` makes the move a compare-and-set: a person who confirmed "v3 -> v4" must not
    silently overwrite someone else's move to v5 made in the meantime."""
    if artifact.family != family:
        raise DomainError(f"{artifact} is not a version of {family}")
    if not reason.strip():
        raise DomainError("say why the alias moves (reason)")
    with transaction.atomic():
        # A row lock cannot guard an alias that does not exist yet: two first moves would both
        # insert. An advisory lock on the alias's name serialises its moves, first or not.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", [f"registry.alias:{family}/{name}"]
            )
        alias = Alias.objects.select_for_update().filter(family=family, name=name).first()
        previous = alias.artifact if alias is not None else None
        if expected_from is not _ANY and previous != expected_from:
            raise Conflict(
                f"{family}@{name} now points at {previous or 'nothing'}, not at "
                f"{expected_from or 'nothing'}: look again before moving it"
            )
        if previous is not None and previous.pk == artifact.pk:
            return alias  # type: ignore[return-value]
        if alias is None:
            alias = Alias.objects.create(family=family, name=name, artifact=artifact)
        else:
            alias.artifact = artifact
            alias.save(update_fields=["artifact", "updated_at"])
        AliasMove.objects.create(
            family=family,
            name=name,
            from_artifact=previous,
            to_artifact=artifact,
            actor=actor,
            actor_name=actor.get_username() if actor else "system",
            reason=reason,
        )
        audit_record(
            actor=actor,
            action="alias.moved",
            target=alias,
            reason=reason,
            data={"from": str(previous) if previous else None, "to": str(artifact)},
        )
    return alias


@dataclass(frozen=True)
class GateSpec:
    task: str
    metric: str
    filter: str = "none"
    min_value: float | None = None
    max_regression: float | None = None


def gates_set(*, actor: User | None, family: str, gates: list[GateSpec]) -> list[PromotionGate]:
    """Replaces a family's promotion gates with `gates`."""
    for gate in gates:
        if gate.min_value is None and gate.max_regression is None:
            raise DomainError(f"gate {gate.task}/{gate.metric}: set min_value or max_regression")
        if gate.max_regression is not None and gate.max_regression < 0:
            raise DomainError(f"gate {gate.task}/{gate.metric}: max_regression must be >= 0")
    with transaction.atomic():
        current = PromotionGate.objects.select_for_update().filter(family=family)
        as_specs = {
            GateSpec(g.task, g.metric, g.filter, g.min_value, g.max_regression) for g in current
        }
        if as_specs == set(gates) and len(gates) == len(as_specs):
            return list(current)  # the same bar: nothing changes, nothing to audit
        current.delete()
        rows = PromotionGate.objects.bulk_create(
            PromotionGate(family=family, **gate.__dict__) for gate in gates
        )
        audit_record(
            actor=actor,
            action="gates.set",
            target=("registry.family", family),
            data={"family": family, "gates": [gate.__dict__ for gate in gates]},
        )
    return rows


def gate_override(*, actor: User, artifact: ModelArtifact, reason: str) -> GateOverride:
    """A release manager lets an artifact that fails its gates roll out, in writing."""
    if not actor.is_release_manager:
        raise PermissionDenied("only a release manager may override promotion gates")
    if len(reason.strip()) < 10:
        raise DomainError("write the reason for overriding the gates (10 characters or more)")
    report = gates_check(artifact)
    if report.passed:
        raise DomainError(f"{artifact} passes its gates: there is nothing to override")
    with transaction.atomic():
        override = GateOverride.objects.create(
            artifact=artifact,
            actor=actor,
            reason=reason,
            failed_gates=[r.as_dict() for r in report.results if not r.passed],
        )
        audit_record(
            actor=actor,
            action="gates.overridden",
            target=artifact,
            reason=reason,
            data={"failed": override.failed_gates},
        )
    return override
