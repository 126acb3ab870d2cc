"""Reads of the registry: lineage walks, latest scores, comparisons and gate checks.

The registry is not tenant-scoped: every signed-in role may read it, so these take no user.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from django.db import connection
from django.db.models import Count, Prefetch, Q, QuerySet

from registry.choices import ArtifactFormat, Relation, Verdict
from registry.models import Alias, EvalScore, LineageEdge, ModelArtifact, PromotionGate

# One recursive query per direction finds every artifact reachable from the root. It walks
# artifacts, not paths: UNION drops an artifact met again, so a dense graph (merges of merges)
# costs what its size costs, never the exponential number of its paths, and a cycle (forbidden
# on write, possible by hand) ends the walk instead of hanging it. Depths are the shortest
# distance, computed from the returned edges.
_REACH = """
{name}(id) AS (
    SELECT %(root)s::bigint
  UNION
    SELECT e.{following} FROM registry_lineageedge e JOIN {name} r ON e.{start} = r.id
)"""
# A walk of a few generations (the page's graph) stops in the query instead: it keeps each
# artifact's depth, so an artifact met at two depths is walked again, but never more often than
# the generations asked for. The full walk above reads the whole connected graph (for an artifact
# in the middle of the 10,000-artifact benchmark, 7,700 artifacts and 22,000 edges) where the
# graph drawn needs a few generations of it. It goes one generation further than the edges it
# returns, for the names of the artifacts at their far ends.
_REACH_NEAR = """
{name}(id, depth) AS (
    SELECT %(root)s::bigint, 0
  UNION
    SELECT e.{following}, r.depth + 1 FROM registry_lineageedge e JOIN {name} r ON e.{start} = r.id
    WHERE r.depth < %(max_depth)s
)"""
_EDGES = """
SELECT '{name}', e.child_id, e.parent_id, e.relation, NULL, NULL, NULL
FROM registry_lineageedge e JOIN (SELECT id FROM {name}{near}) r ON e.{start} = r.id"""
# Both walks, their edges and the names of the artifacts they reach, in one query.
_LINEAGE = """
WITH RECURSIVE {up}, {down}
{up_edges}
UNION ALL {down_edges}
UNION ALL
SELECT 'artifact', a.id, NULL, NULL, a.family, a.version, a.format
FROM registry_modelartifact a WHERE a.id IN (SELECT id FROM up UNION SELECT id FROM down)
"""
_ANCESTORS = """
WITH RECURSIVE {up}
SELECT DISTINCT e.parent_id FROM registry_lineageedge e JOIN up r ON e.child_id = r.id
"""
_NEAR = " WHERE depth < %(max_depth)s GROUP BY id"
# Up to this depth the walk stops in the query: each artifact is walked at most this many times.
NEAR_DEPTH = 8
MAX_DEPTH = 1000


def _lineage_sql(max_depth: int) -> str:
    reach, near = (_REACH_NEAR, _NEAR) if max_depth <= NEAR_DEPTH else (_REACH, "")
    up = {"name": "up", "start": "child_id", "following": "parent_id", "near": near}
    down = {"name": "down", "start": "parent_id", "following": "child_id", "near": near}
    return _LINEAGE.format(
        up=reach.format(**up),
        down=reach.format(**down),
        up_edges=_EDGES.format(**up),
        down_edges=_EDGES.format(**down),
    )


class Edge(NamedTuple):
    """One lineage edge, at the depth of the nearer of its ends plus one. A named tuple, not a
    dataclass: a full walk of a dense graph makes tens of thousands of them."""

    child_id: int
    parent_id: int
    relation: str
    depth: int


Row = tuple[int, int, str]


def _by_depth(root: int, rows: list[Row], *, up: bool, max_depth: int) -> list[Edge]:
    """Breadth first from the root: each edge at the depth of the nearer of its ends, plus one."""
    by_start: dict[int, list[Row]] = {}
    for row in rows:
        by_start.setdefault(row[0] if up else row[1], []).append(row)
    depth = {root: 0}
    frontier = [root]
    edges: list[Edge] = []
    level = 0
    while frontier and level < max_depth:
        level += 1
        following_frontier = []
        for node in frontier:
            for child_id, parent_id, relation in by_start.get(node, ()):
                edges.append(Edge(child_id, parent_id, relation, level))
                other = parent_id if up else child_id
                if other not in depth:
                    depth[other] = level
                    following_frontier.append(other)
        frontier = following_frontier
    return edges


def ancestor_ids(artifact: ModelArtifact) -> set[int]:
    with connection.cursor() as cursor:
        reach = _REACH.format(name="up", start="child_id", following="parent_id")
        cursor.execute(_ANCESTORS.format(up=reach), {"root": artifact.pk})
        return {row[0] for row in cursor.fetchall()}


class Named(Protocol):
    """What draws and names an artifact of a lineage: a ModelArtifact or its ArtifactRef."""

    @property
    def pk(self) -> Any: ...
    @property
    def family(self) -> str: ...
    @property
    def version(self) -> str: ...
    def get_format_display(self) -> str: ...


class ArtifactRef(NamedTuple):
    """An artifact of a lineage walk as drawn and named: a walk of a dense graph reaches
    thousands, and a model instance each would cost more than the walk."""

    pk: int
    family: str
    version: str
    format: str

    def __str__(self) -> str:
        return f"{self.family}:{self.version}"

    def get_format_display(self) -> str:
        return (
            ArtifactFormat(self.format).label
            if self.format in ArtifactFormat.values
            else self.format
        )


@dataclass(frozen=True)
class Lineage:
    root: ModelArtifact
    ancestors: list[Edge]
    descendants: list[Edge]
    artifacts: Mapping[int, Named]


def lineage(artifact: ModelArtifact, *, max_depth: int = MAX_DEPTH) -> Lineage:
    """Ancestors and descendants to any depth, with the artifacts they reach: one query."""
    with connection.cursor() as cursor:
        cursor.execute(_lineage_sql(max_depth), {"root": artifact.pk, "max_depth": max_depth})
        rows = cursor.fetchall()
    up_rows: list[Row] = []
    down_rows: list[Row] = []
    refs: dict[int, Named] = {}
    for kind, first, parent_id, relation, family, version, format in rows:
        if kind == "up":
            up_rows.append((first, parent_id, relation))
        elif kind == "down":
            down_rows.append((first, parent_id, relation))
        else:
            refs[first] = ArtifactRef(first, family, version, format)
    up = _by_depth(artifact.pk, up_rows, up=True, max_depth=max_depth)
    down = _by_depth(artifact.pk, down_rows, up=False, max_depth=max_depth)
    if max_depth > NEAR_DEPTH:  # the full walk reached more than the depth asked for
        ids = {artifact.pk} | {e.parent_id for e in up} | {e.child_id for e in down}
        refs = {pk: ref for pk, ref in refs.items() if pk in ids}
    return Lineage(root=artifact, ancestors=up, descendants=down, artifacts=refs)


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
    return _latest_scores(artifact)[artifact.pk]


def _latest_scores(*artifacts: ModelArtifact | None) -> dict[int, dict[ScoreKey, EvalScore]]:
    """`latest_scores` of several artifacts (None for none) in one query, by artifact id."""
    ids = {artifact.pk for artifact in artifacts if artifact is not None}
    scores = (
        EvalScore.objects.filter(run__artifact__in=ids)
        .select_related("run")
        .order_by("run__artifact_id", "task", "metric", "filter", "-run__created_at", "-run_id")
        .distinct("run__artifact_id", "task", "metric", "filter")
    )
    by_artifact: dict[int, dict[ScoreKey, EvalScore]] = {pk: {} for pk in ids}
    for s in scores:
        by_artifact[s.run.artifact_id][(s.task, s.metric, s.filter)] = s
    return by_artifact


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
    scores = _latest_scores(artifact, parent, production)
    mine = scores[artifact.pk]
    theirs = scores[parent.pk] if parent else {}
    prod = scores[production.pk] if production else {}
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
    production = alias_target(artifact.family, "production")
    if production is not None and production.pk == artifact.pk:
        production = None
    scores = _latest_scores(artifact, production)
    mine = scores[artifact.pk]
    prod = scores[production.pk] if production else {}
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
