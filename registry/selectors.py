"""Reads of the registry: lineage walks, latest scores, comparisons and gate checks.

The registry is not tenant-scoped: every signed-in role may read it, so these take no user.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Count, Prefetch, Q, QuerySet

from registry.choices import Relation, Verdict
from registry.models import Alias, EvalScore, LineageEdge, ModelArtifact, PromotionGate

# One recursive query finds every artifact reachable from the root in one direction. It walks
# artifacts, not paths: UNION drops an artifact met again, so a dense graph (merges of merges)
# costs what its size costs, never the exponential number of its paths, and a cycle (forbidden
# on write, possible by hand) ends the walk instead of hanging it. Depths are the shortest
# distance, computed from the returned edges.
_REACH = """
WITH RECURSIVE reach(id) AS (
    SELECT %(root)s::bigint
  UNION
    SELECT e.{following} FROM registry_lineageedge e JOIN reach r ON e.{start} = r.id
)
SELECT e.child_id, e.parent_id, e.relation
FROM registry_lineageedge e JOIN reach r ON e.{start} = r.id
"""
MAX_DEPTH = 1000


@dataclass(frozen=True)
class Edge:
    child_id: int
    parent_id: int
    relation: str
    depth: int


def _walk(artifact_id: int, *, up: bool, max_depth: int) -> list[Edge]:
    start, following = ("child_id", "parent_id") if up else ("parent_id", "child_id")
    with connection.cursor() as cursor:
        cursor.execute(_REACH.format(start=start, following=following), {"root": artifact_id})
        rows = cursor.fetchall()
    by_start: dict[int, list[tuple[int, int, str]]] = {}
    for child_id, parent_id, relation in rows:
        key = child_id if up else parent_id
        by_start.setdefault(key, []).append((child_id, parent_id, relation))
    # Breadth first from the root: each edge at the depth of the nearer of its ends, plus one.
    depth = {artifact_id: 0}
    frontier = [artifact_id]
    edges: list[Edge] = []
    while frontier:
        following_frontier = []
        for node in frontier:
            if depth[node] >= max_depth:
                continue
            for child_id, parent_id, relation in by_start.get(node, ()):
                edges.append(Edge(child_id, parent_id, relation, depth[node] + 1))
                other = parent_id if up else child_id
                if other not in depth:
                    depth[other] = depth[node] + 1
                    following_frontier.append(other)
        frontier = following_frontier
    return edges


def ancestor_ids(artifact: ModelArtifact) -> set[int]:
    return {edge.parent_id for edge in _walk(artifact.pk, up=True, max_depth=MAX_DEPTH)}


@dataclass(frozen=True)
class Lineage:
    root: ModelArtifact
    ancestors: list[Edge]
    descendants: list[Edge]
    artifacts: dict[int, ModelArtifact]


def lineage(artifact: ModelArtifact, *, max_depth: int = MAX_DEPTH) -> Lineage:
    """Ancestors and descendants to any depth: two recursive queries and one fetch of the rows."""
    up = _walk(artifact.pk, up=True, max_depth=max_depth)
    down = _walk(artifact.pk, up=False, max_depth=max_depth)
    ids = {artifact.pk} | {e.parent_id for e in up} | {e.child_id for e in down}
    ids |= {e.child_id for e in up} | {e.parent_id for e in down}
    rows = ModelArtifact.objects.in_bulk(ids)
    return Lineage(root=artifact, ancestors=up, descendants=down, artifacts=rows)


def artifact_list(
    *, search: str = "", family: str = "", alias: str = "", format: str = ""
) -> QuerySet[ModelArtifact]:
    queryset = ModelArtifact.objects.prefetch_related(
        Prefetch("aliases", queryset=Alias.objects.order_by("name"))
    ).order_by("-created_at", "-id")
    if search:
        queryset = queryset.filter(
            Q(family__icontains=search) | Q(version__icontains=search) | Q(uri__icontains=search)
        )
    if family:
        queryset = queryset.filter(family=family)
    if alias:
        queryset = queryset.filter(aliases__name=alias)
    if format:
        queryset = queryset.filter(format=format)
    return queryset


def families() -> list[dict[str, Any]]:
    rows = ModelArtifact.objects.values("family").annotate(versions=Count("id"))
    return [dict(row) for row in rows.order_by("family")]


def alias_target(family: str, name: str) -> ModelArtifact | None:
    alias = Alias.objects.select_related("artifact").filter(family=family, name=name).first()
    return alias.artifact if alias else None


def parents_of(artifact: ModelArtifact) -> list[LineageEdge]:
    """Direct parents, the one an artifact is compared with first: a merge has several, and
    its fine-tune (or adapter, quantization, distillation) parent is the meaningful baseline."""
    edges = LineageEdge.objects.filter(child=artifact).select_related("parent")
    return sorted(edges, key=lambda e: (e.relation == Relation.MERGE, e.pk))


ScoreKey = tuple[str, str, str]


def latest_scores(artifact: ModelArtifact) -> dict[ScoreKey, EvalScore]:
    """Each (task, metric, filter) as measured by the artifact's most recent run that has it."""
    scores = (
        EvalScore.objects.filter(run__artifact=artifact)
        .select_related("run")
        .order_by("task", "metric", "filter", "-run__created_at", "-run_id")
        .distinct("task", "metric", "filter")
    )
    return {(s.task, s.metric, s.filter): s for s in scores}


# Two standard errors of the difference: about a 95 % band when both errors are known.
NOISE_Z = 2.0


@dataclass(frozen=True)
class Delta:
    other: float | None
    delta: float | None
    verdict: Verdict


def compare(score: EvalScore, other: EvalScore | None) -> Delta:
    if other is None or score.value is None or other.value is None:
        return Delta(other.value if other else None, None, Verdict.NOT_COMPARABLE)
    delta = score.value - other.value
    if score.stderr is not None and other.stderr is not None:
        noise = NOISE_Z * math.hypot(score.stderr, other.stderr)
        if abs(delta) <= noise:
            return Delta(other.value, delta, Verdict.WITHIN_NOISE)
    elif delta == 0:
        return Delta(other.value, delta, Verdict.WITHIN_NOISE)
    higher_is_better = score.higher_is_better
    if higher_is_better is None:
        higher_is_better = other.higher_is_better
    if higher_is_better is None:
        return Delta(other.value, delta, Verdict.NOT_COMPARABLE)
    better = delta > 0 if higher_is_better else delta < 0
    return Delta(other.value, delta, Verdict.IMPROVED if better else Verdict.REGRESSED)


@dataclass(frozen=True)
class ScoreRow:
    score: EvalScore
    vs_parent: Delta | None
    vs_production: Delta | None


@dataclass(frozen=True)
class Comparison:
    parent: ModelArtifact | None
    production: ModelArtifact | None
    rows: list[ScoreRow]


def score_comparison(artifact: ModelArtifact) -> Comparison:
    """The artifact's scores with deltas against its (first) parent and the production alias."""
    edges = parents_of(artifact)
    parent = edges[0].parent if edges else None
    production = alias_target(artifact.family, "production")
    if production is not None and production.pk == artifact.pk:
        production = None
    mine = latest_scores(artifact)
    theirs = latest_scores(parent) if parent else {}
    prod = latest_scores(production) if production else {}
    rows = [
        ScoreRow(
            score=score,
            vs_parent=compare(score, theirs.get(key)) if parent else None,
            vs_production=compare(score, prod.get(key)) if production else None,
        )
        for key, score in sorted(mine.items())
    ]
    return Comparison(parent=parent, production=production, rows=rows)


@dataclass(frozen=True)
class GateResult:
    gate: PromotionGate
    value: float | None
    production_value: float | None
    passed: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.gate.task,
            "metric": self.gate.metric,
            "filter": self.gate.filter,
            "min_value": self.gate.min_value,
            "max_regression": self.gate.max_regression,
            "value": self.value,
            "production_value": self.production_value,
            "passed": self.passed,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class GateReport:
    artifact: ModelArtifact
    results: list[GateResult]

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)


def _check(gate: PromotionGate, score: EvalScore | None, prod: EvalScore | None) -> GateResult:
    value = score.value if score else None
    prod_value = prod.value if prod else None
    if value is None:
        why = "no score" if score is None else "the score is NaN"
        return GateResult(gate, None, prod_value, False, f"{why} for {gate.task}/{gate.metric}")
    if gate.min_value is not None and value < gate.min_value:
        return GateResult(gate, value, prod_value, False, f"{value:g} < minimum {gate.min_value:g}")
    if gate.max_regression is not None and prod_value is not None:
        higher_is_better = score.higher_is_better if score else None
        drop = prod_value - value if higher_is_better is not False else value - prod_value
        if drop > gate.max_regression:
            return GateResult(
                gate,
                value,
                prod_value,
                False,
                f"regresses {drop:g} against production ({prod_value:g}); "
                f"at most {gate.max_regression:g} allowed",
            )
    return GateResult(gate, value, prod_value, True, "passes")


def gates_check(artifact: ModelArtifact) -> GateReport:
    gates = list(PromotionGate.objects.filter(family=artifact.family))
    if not gates:
        return GateReport(artifact, [])
    mine = latest_scores(artifact)
    production = alias_target(artifact.family, "production")
    prod = latest_scores(production) if production and production.pk != artifact.pk else {}
    results = [
        _check(
            gate,
            mine.get((gate.task, gate.metric, gate.filter)),
            prod.get((gate.task, gate.metric, gate.filter)),
        )
        for gate in gates
    ]
    return GateReport(artifact, results)


def gates_cleared(artifact: ModelArtifact) -> bool:
    """Passes its gates, or a release manager overrode them in writing (for rollouts)."""
    return gates_check(artifact).passed or artifact.overrides.exists()
