"""Registry writes: registration, lineage, evals, aliases and gates."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.errors import Conflict, DomainError, PermissionDenied
from core.models import AuditEvent
from registry.choices import EvalSource, Relation, Verdict
from registry.evals import parse_lm_eval, parse_score_list
from registry.models import Alias, AliasMove, EvalRun, EvalScore, LineageEdge, ModelArtifact
from registry.selectors import (
    NEAR_DEPTH,
    gates_check,
    gates_cleared,
    lineage,
    score_comparison,
)
from registry.services import (
    GateSpec,
    ParentLink,
    alias_move,
    artifact_register,
    eval_run_record,
    gate_override,
    gates_set,
    lineage_add,
    lineage_import_model_card,
)
from tenants.models import User
from tests.registry.factories import digest_of, register

RESULTS = Path(__file__).parent / "data" / "results_2026-11-30T12-00-00.json"


def scores(artifact: ModelArtifact, *items: tuple[str, float, float | None]) -> None:
    parsed = parse_score_list(
        [
            {"task": t, "metric": "acc", "value": v, "stderr": e, "higher_is_better": True}
            for t, v, e in items
        ]
    )
    eval_run_record(actor=None, artifact=artifact, parsed=parsed, source=EvalSource.SCORES)


# --- registration ---------------------------------------------------------------------------------


def test_registering_the_same_version_and_digest_again_returns_it(db: None) -> None:
    first = register(version="v1")
    again, created = artifact_register(
        actor=None,
        family="support-chat",
        version="v1",
        uri="elsewhere",
        digest="sha256:" + digest_of("support-chat:v1").upper(),
        format="gguf",
    )
    assert (again.pk, created) == (first.pk, False)
    assert AuditEvent.objects.filter(action="artifact.registered").count() == 1


def test_the_same_version_with_another_digest_is_a_conflict(db: None) -> None:
    register(version="v1")
    with pytest.raises(Conflict, match="already registered with digest"):
        register(version="v1", digest=digest_of("something else"))


def test_a_digest_must_be_sha256(db: None) -> None:
    with pytest.raises(DomainError, match="64 hex characters"):
        register(digest="md5:abc")


# --- lineage --------------------------------------------------------------------------------------


def test_lineage_walks_ancestors_and_descendants_to_any_depth(db: None) -> None:
    chain = [register(version=f"v{i}") for i in range(60)]
    for parent, child in itertools.pairwise(chain):
        lineage_add(actor=None, child=child, links=[ParentLink(parent, Relation.FINETUNE)])
    with CaptureQueriesContext(connection) as queries:
        walk = lineage(chain[30])
    assert len(walk.ancestors) == 30
    assert len(walk.descendants) == 29
    assert max(e.depth for e in walk.ancestors) == 30
    # One query, both directions and the rows, whatever the depth.
    assert len(queries) == 1


def test_a_cycle_is_rejected_and_nothing_is_written(db: None) -> None:
    base, tuned, quant = register(version="base"), register(version="ft"), register(version="q")
    lineage_add(actor=None, child=tuned, links=[ParentLink(base, Relation.FINETUNE)])
    lineage_add(actor=None, child=quant, links=[ParentLink(tuned, Relation.QUANTIZED)])
    other = register(version="other")
    with pytest.raises(DomainError, match="would close a cycle"):
        lineage_add(
            actor=None,
            child=base,
            links=[ParentLink(other, Relation.MERGE), ParentLink(quant, Relation.MERGE)],
        )
    assert not LineageEdge.objects.filter(child=base).exists()


def test_an_artifact_cannot_be_its_own_parent(db: None) -> None:
    base = register()
    with pytest.raises(DomainError, match="its own parent"):
        lineage_add(actor=None, child=base, links=[ParentLink(base, Relation.FINETUNE)])


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_edges_cannot_close_a_cycle_together() -> None:
    a, b = register(version="a"), register(version="b")
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def link(child: ModelArtifact, parent: ModelArtifact) -> None:
        try:
            barrier.wait()
            lineage_add(actor=None, child=child, links=[ParentLink(parent, Relation.MERGE)])
        except DomainError as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=link, args=pair) for pair in ((a, b), (b, a))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert LineageEdge.objects.count() == 1
    assert len(errors) == 1


def test_lineage_imports_from_a_model_card(db: None) -> None:
    register(family="llama", version="3.1-8b", uri="hf://meta-llama/Llama-3.1-8B-Instruct")
    child = register(version="v1")
    card = (
        "---\nlicense: llama3.1\nbase_model: meta-llama/Llama-3.1-8B-Instruct\n"
        "base_model_relation: adapter\n---\n# Support chat\n"
    )
    edges = lineage_import_model_card(actor=None, child=child, card=card)
    assert [(str(e.parent), e.relation) for e in edges] == [("llama:3.1-8b", "adapter")]


@pytest.mark.parametrize(
    ("card", "message"),
    [
        ("# no front matter", "no YAML front matter"),
        ("---\nbase_model: 5\n---\n", "base_model: expected"),
        ("---\nbase_model: org/unknown\n---\n", "unknown parent 'org/unknown'"),
        ("---\nbase_model: org/x\nbase_model_relation: cloned\n---\n", "base_model_relation"),
    ],
)
def test_bad_model_cards_say_what_is_wrong(db: None, card: str, message: str) -> None:
    child = register(version="v1")
    with pytest.raises(DomainError, match=message):
        lineage_import_model_card(actor=None, child=child, card=card)


# --- evals ----------------------------------------------------------------------------------------


def test_an_lm_eval_upload_is_stored_with_its_run_metadata(db: None) -> None:
    artifact = register()
    parsed = parse_lm_eval(json.loads(RESULTS.read_text()))
    run = eval_run_record(actor=None, artifact=artifact, parsed=parsed, source=EvalSource.LM_EVAL)
    assert EvalScore.objects.filter(run=run).count() == 6
    assert run.n_shot["gsm8k"] == 5
    nan = EvalScore.objects.get(run=run, metric="bleu_max")
    assert nan.value is None
    assert nan.raw["value"] == "nan"


def test_comparisons_label_deltas_using_the_standard_errors(db: None) -> None:
    base, tuned = register(version="base"), register(version="ft")
    lineage_add(actor=None, child=tuned, links=[ParentLink(base, Relation.FINETUNE)])
    scores(base, ("a", 0.50, 0.01), ("b", 0.50, 0.01), ("c", 0.50, 0.01), ("d", 0.5, None))
    scores(tuned, ("a", 0.60, 0.01), ("b", 0.51, 0.01), ("c", 0.40, 0.01), ("d", 0.6, None))
    rows = {r.score.task: r.vs_parent for r in score_comparison(tuned).rows}
    verdicts = {task: delta.verdict if delta else None for task, delta in rows.items()}
    assert verdicts == {
        "a": Verdict.IMPROVED,
        "b": Verdict.WITHIN_NOISE,
        "c": Verdict.REGRESSED,
        # Without standard errors there is no noise band: the sign decides.
        "d": Verdict.IMPROVED,
    }
    assert rows["a"] is not None
    assert rows["a"].delta == pytest.approx(0.10)


def test_comparisons_use_the_production_alias(db: None) -> None:
    prod, candidate = register(version="v1"), register(version="v2")
    alias_move(actor=None, family="support-chat", name="production", artifact=prod, reason="GA")
    scores(prod, ("a", 0.7, 0.01))
    scores(candidate, ("a", 0.6, 0.01), ("new", 0.5, 0.01))
    comparison = score_comparison(candidate)
    assert comparison.production == prod
    verdicts = {
        r.score.task: r.vs_production.verdict if r.vs_production else None for r in comparison.rows
    }
    assert verdicts == {"a": Verdict.REGRESSED, "new": Verdict.NOT_COMPARABLE}


# --- aliases --------------------------------------------------------------------------------------


def test_alias_moves_keep_history_with_actor_and_reason(release_manager: User) -> None:
    v1, v2 = register(version="v1"), register(version="v2")
    alias_move(
        actor=release_manager, family="support-chat", name="production", artifact=v1, reason="GA"
    )
    alias_move(
        actor=release_manager,
        family="support-chat",
        name="production",
        artifact=v2,
        reason="canary passed",
    )
    alias_move(
        actor=release_manager, family="support-chat", name="production", artifact=v2, reason="again"
    )
    assert Alias.objects.get(family="support-chat", name="production").artifact == v2
    moves = list(AliasMove.objects.filter(name="production"))
    assert [(m.from_artifact, m.to_artifact, m.reason) for m in moves] == [
        (v1, v2, "canary passed"),
        (None, v1, "GA"),
    ]
    assert AuditEvent.objects.filter(action="alias.moved").count() == 2


def test_an_alias_needs_a_reason_and_a_version_of_its_family(db: None) -> None:
    v1 = register(version="v1")
    other = register(family="other", version="v1")
    with pytest.raises(DomainError, match="reason"):
        alias_move(actor=None, family="support-chat", name="production", artifact=v1, reason=" ")
    with pytest.raises(DomainError, match="not a version of support-chat"):
        alias_move(actor=None, family="support-chat", name="production", artifact=other, reason="x")


@pytest.mark.django_db(transaction=True)
def test_concurrent_alias_moves_leave_a_consistent_history() -> None:
    versions = [register(version=f"v{i}") for i in range(2)]
    barrier = threading.Barrier(2)

    def move(artifact: ModelArtifact) -> None:
        try:
            barrier.wait()
            alias_move(
                actor=None, family="support-chat", name="prod", artifact=artifact, reason="r"
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=move, args=(v,)) for v in versions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    moves = list(AliasMove.objects.order_by("id"))
    current = Alias.objects.get(name="prod").artifact
    # One move created the alias, the other moved it from there: the chain is unbroken.
    assert len(moves) == 2
    assert moves[0].from_artifact is None
    assert moves[1].from_artifact == moves[0].to_artifact
    assert moves[1].to_artifact == current


# --- gates ----------------------------------------------------------------------------------------


def test_gates_check_minimums_and_regressions_against_production(db: None) -> None:
    prod, candidate = register(version="v1"), register(version="v2")
    alias_move(actor=None, family="support-chat", name="production", artifact=prod, reason="GA")
    scores(prod, ("arc", 0.70, 0.01), ("gsm", 0.40, 0.01))
    scores(candidate, ("arc", 0.66, 0.01), ("gsm", 0.45, 0.01))
    gates_set(
        actor=None,
        family="support-chat",
        gates=[
            GateSpec(task="arc", metric="acc", max_regression=0.02),
            GateSpec(task="gsm", metric="acc", min_value=0.5),
            GateSpec(task="missing", metric="acc", min_value=0.1),
        ],
    )
    report = gates_check(candidate)
    results = {r.gate.task: r for r in report.results}
    assert not report.passed
    assert not results["arc"].passed
    assert "regresses" in results["arc"].reason
    assert not results["gsm"].passed
    assert "< minimum 0.5" in results["gsm"].reason
    assert not results["missing"].passed
    assert "no score" in results["missing"].reason


def test_a_failing_candidate_is_cleared_only_by_a_written_override(
    release_manager: User, viewer: User
) -> None:
    candidate = register(version="v2")
    gates_set(
        actor=None, family="support-chat", gates=[GateSpec(task="a", metric="acc", min_value=0.9)]
    )
    scores(candidate, ("a", 0.5, None))
    assert not gates_cleared(candidate)
    with pytest.raises(PermissionDenied):
        gate_override(actor=viewer, artifact=candidate, reason="ship it, I am sure")
    with pytest.raises(DomainError, match="reason"):
        gate_override(actor=release_manager, artifact=candidate, reason="ok")
    gate_override(
        actor=release_manager, artifact=candidate, reason="Known eval bug in task a, see #12"
    )
    assert gates_cleared(candidate)
    event = AuditEvent.objects.get(action="gates.overridden")
    assert event.reason == "Known eval bug in task a, see #12"


def test_a_family_without_gates_passes(db: None) -> None:
    assert gates_check(register()).passed
    assert EvalRun.objects.count() == 0


def test_an_alias_move_can_be_a_compare_and_set(db: None) -> None:
    v1, v2, v3 = (register(version=f"v{i}") for i in (1, 2, 3))
    alias_move(actor=None, family="support-chat", name="production", artifact=v1, reason="GA")
    alias_move(actor=None, family="support-chat", name="production", artifact=v2, reason="x")
    with pytest.raises(Conflict, match="now points at support-chat:v2, not at support-chat:v1"):
        alias_move(
            actor=None,
            family="support-chat",
            name="production",
            artifact=v3,
            reason="I looked when it was v1",
            expected_from=v1,
        )


def test_versions_are_plain_names(db: None) -> None:
    with pytest.raises(DomainError, match="letters, digits"):
        register(version="v1/../../etc")


def test_a_dense_lineage_is_walked_by_artifact_not_by_path(db: None) -> None:
    # Every artifact merges the two before it: 2^40 paths from the top to the bottom.
    nodes = [register(version=f"n{i}") for i in range(42)]
    for i in range(2, 42):
        lineage_add(
            actor=None,
            child=nodes[i],
            links=[
                ParentLink(nodes[i - 1], Relation.MERGE),
                ParentLink(nodes[i - 2], Relation.MERGE),
            ],
        )
    walk = lineage(nodes[41])
    assert len(walk.ancestors) == 80  # every edge once
    depths = {(e.child_id, e.parent_id): e.depth for e in walk.ancestors}
    assert depths[(nodes[41].pk, nodes[40].pk)] == 1
    # n2 is 20 hops from n41 when going two at a time; its own parent edge is one further.
    assert depths[(nodes[2].pk, nodes[0].pk)] == 21


@pytest.mark.parametrize("max_depth", [1, 2, 4, NEAR_DEPTH])
def test_a_short_walk_stops_in_the_query_and_matches_the_full_walk(
    db: None, max_depth: int
) -> None:
    # A dense graph both ways from the middle: each artifact merges the two before it.
    nodes = [register(version=f"n{i}") for i in range(24)]
    for i in range(2, 24):
        lineage_add(
            actor=None,
            child=nodes[i],
            links=[
                ParentLink(nodes[i - 1], Relation.MERGE),
                ParentLink(nodes[i - 2], Relation.MERGE),
            ],
        )
    full = lineage(nodes[12])
    short = lineage(nodes[12], max_depth=max_depth)
    for got, every in ((short.ancestors, full.ancestors), (short.descendants, full.descendants)):
        assert sorted(got) == sorted(e for e in every if e.depth <= max_depth)
    drawn = {nodes[12].pk} | {e.parent_id for e in short.ancestors}
    drawn |= {e.child_id for e in short.descendants}
    assert set(short.artifacts) == drawn
    assert str(short.artifacts[nodes[11].pk]) == "support-chat:n11"
