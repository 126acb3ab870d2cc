"""The registry's pages: list, artifact page (lineage graph, evals, gates, aliases), alias moves."""

from __future__ import annotations

import html
import itertools
import re
from dataclasses import dataclass

import pytest
from django.test import Client
from pytest_django import DjangoAssertNumQueries

from core.errors import DomainError
from registry import services
from registry.choices import ArtifactFormat, Relation
from registry.models import Alias, AliasMove, ModelArtifact
from registry.views import GRAPH_DEPTH
from tenants.models import User
from tests.factories import (
    EvalRunFactory,
    EvalScoreFactory,
    LineageEdgeFactory,
    ModelArtifactFactory,
    PromotionGateFactory,
)

HTMX = {"HX-Request": "true"}


def move(actor: User | None, artifact: ModelArtifact, name: str, reason: str = "test") -> None:
    services.alias_move(
        actor=actor, family=artifact.family, name=name, artifact=artifact, reason=reason
    )


def scores(artifact: ModelArtifact, *rows: tuple[str, float | None, float | None]) -> None:
    run = EvalRunFactory.create(artifact=artifact)
    for task, value, stderr in rows:
        EvalScoreFactory.create(run=run, task=task, value=value, stderr=stderr)


def row(page: str, attribute: str, value: str) -> str:
    """The text of the table row marked `attribute="value"`, tags stripped."""
    match = re.search(rf'<tr {attribute}="{re.escape(value)}">(.*?)</tr>', page, re.DOTALL)
    assert match is not None, f"no row {attribute}={value}"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", match.group(1))).split())


def svg(page: str) -> str:
    match = re.search(r"<svg class=\"lineage\".*?</svg>", page, re.DOTALL)
    assert match is not None, "no lineage graph"
    return match.group(0)


# --- the list -------------------------------------------------------------------------------------


def test_the_registry_requires_a_login(client: Client, db: None) -> None:
    response = client.get("/registry/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=/registry/")


@pytest.mark.parametrize("actor", ["release_manager", "tenant_a_admin", "viewer"])
def test_every_role_reads_the_list_and_an_artifact_page(
    client: Client, request: pytest.FixtureRequest, db: None, actor: str
) -> None:
    artifact = ModelArtifactFactory.create(version="v1")
    client.force_login(request.getfixturevalue(actor))
    assert client.get("/registry/").status_code == 200
    assert client.get(f"/registry/support-chat/{artifact.version}/").status_code == 200


def test_the_nav_links_to_the_registry(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    page = client.get("/registry/").content.decode()
    assert '<nav>\n      <a href="/registry/">Registry</a>' in page


def test_the_list_shows_each_artifact_with_its_alias_badges(
    client: Client, release_manager: User
) -> None:
    v1 = ModelArtifactFactory.create(version="v1")
    v2 = ModelArtifactFactory.create(version="v2")
    move(release_manager, v1, "production")
    move(release_manager, v2, "candidate")
    client.force_login(release_manager)
    page = client.get("/registry/").content.decode()
    assert 'href="/registry/support-chat/v1/"' in page
    assert row(page, "data-artifact", "support-chat:v1").endswith("production " + _date(v1))
    assert "candidate" in row(page, "data-artifact", "support-chat:v2")
    assert '<span class="badge badge-production">production</span>' in page


def _date(artifact: ModelArtifact) -> str:
    return artifact.created_at.strftime("%Y-%m-%d %H:%M")


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("support", {"support-chat:v1", "support-chat:v2"}),
        ("v2", {"support-chat:v2"}),
        ("hf://meta", {"llama-3:8b"}),
        ("nothing-like-it", set()),
    ],
)
def test_the_search_matches_family_version_and_uri(
    client: Client, viewer: User, query: str, found: set[str]
) -> None:
    ModelArtifactFactory.create(version="v1")
    ModelArtifactFactory.create(version="v2")
    ModelArtifactFactory.create(family="llama-3", version="8b", uri="hf://meta-llama/Llama-3-8B")
    client.force_login(viewer)
    page = client.get("/registry/", {"q": query}).content.decode()
    assert set(re.findall(r'<tr data-artifact="([^"]+)">', page)) == found


def test_the_filters_narrow_by_family_alias_and_format(
    client: Client, release_manager: User
) -> None:
    v1 = ModelArtifactFactory.create(version="v1")
    ModelArtifactFactory.create(version="v1-gguf", format=ArtifactFormat.GGUF)
    ModelArtifactFactory.create(family="llama-3", version="8b")
    move(release_manager, v1, "production")
    client.force_login(release_manager)

    def listed(**filters: str) -> set[str]:
        page = client.get("/registry/", filters).content.decode()
        return set(re.findall(r'<tr data-artifact="([^"]+)">', page))

    assert listed(family="support-chat") == {"support-chat:v1", "support-chat:v1-gguf"}
    assert listed(alias="production") == {"support-chat:v1"}
    assert listed(format="gguf") == {"support-chat:v1-gguf"}
    assert listed(family="llama-3", format="gguf") == set()


def test_the_filter_form_offers_families_aliases_and_formats_and_keeps_the_choice(
    client: Client, release_manager: User
) -> None:
    move(release_manager, ModelArtifactFactory.create(version="v1"), "production")
    ModelArtifactFactory.create(family="llama-3", version="8b")
    client.force_login(release_manager)
    page = client.get("/registry/", {"family": "llama-3", "q": "8b"}).content.decode()
    assert '<form class="card filters" method="get" action="/registry/"' in page
    assert '<option value="llama-3" selected>llama-3 (1)</option>' in page
    assert '<option value="support-chat">support-chat (1)</option>' in page
    assert '<option value="production">production</option>' in page
    assert '<option value="lora_adapter">LoRA adapter</option>' in page
    assert 'name="q" type="search" value="8b"' in page


def test_an_invalid_filter_is_ignored_and_flagged_not_a_500(client: Client, viewer: User) -> None:
    ModelArtifactFactory.create(version="v1")
    client.force_login(viewer)
    response = client.get("/registry/", {"format": "zip", "page": "many"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "format: Select a valid choice" in page
    assert '<tr data-artifact="support-chat:v1">' in page


def test_the_list_pages_fifty_artifacts_at_a_time_keeping_the_filters(
    client: Client, viewer: User
) -> None:
    ModelArtifactFactory.create_batch(51)
    client.force_login(viewer)
    first = client.get("/registry/", {"family": "support-chat"}).content.decode()
    assert first.count("<tr data-artifact=") == 50
    assert "51 artifacts" in first
    assert "page 1 of 2" in first
    assert 'href="?family=support-chat&amp;page=2"' in first
    second = client.get("/registry/", {"family": "support-chat", "page": "2"}).content.decode()
    assert second.count("<tr data-artifact=") == 1
    assert 'rel="prev"' in second


def test_htmx_search_gets_only_the_rows_fragment(client: Client, viewer: User) -> None:
    ModelArtifactFactory.create(version="v1")
    ModelArtifactFactory.create(version="v2")
    client.force_login(viewer)
    response = client.get("/registry/", {"q": "v2"}, headers=HTMX)
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="artifact-rows"')
    assert "<html" not in body
    assert '<tr data-artifact="support-chat:v2">' in body
    assert "support-chat:v1" not in body
    # A browser cache must not answer a full-page visit with the fragment, or the reverse.
    assert "HX-Request" in response["Vary"]


def test_the_search_form_refreshes_the_rows_with_htmx_and_pushes_the_url(
    client: Client, viewer: User
) -> None:
    client.force_login(viewer)
    page = client.get("/registry/").content.decode()
    assert 'hx-get="/registry/"' in page
    assert 'hx-target="#artifact-rows"' in page
    assert 'hx-push-url="true"' in page


def test_an_htmx_history_restore_gets_the_whole_page(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    headers = {**HTMX, "HX-History-Restore-Request": "true"}
    assert "<html" in client.get("/registry/", headers=headers).content.decode()


@pytest.mark.parametrize("artifacts", [1, 40])
def test_the_list_query_count_does_not_grow_with_the_rows(
    client: Client,
    release_manager: User,
    django_assert_num_queries: DjangoAssertNumQueries,
    artifacts: int,
) -> None:
    for version in ModelArtifactFactory.create_batch(artifacts):
        move(release_manager, version, f"pin-{version.version}")
    client.force_login(release_manager)
    # session, user; count, page, aliases; the families and alias names of the filters
    with django_assert_num_queries(7):
        assert client.get("/registry/").status_code == 200
    with django_assert_num_queries(5):
        assert client.get("/registry/", {"q": "v"}, headers=HTMX).status_code == 200


# --- an artifact's page ---------------------------------------------------------------------------


@dataclass
class Family:
    base: ModelArtifact
    v2: ModelArtifact
    v3: ModelArtifact
    v4: ModelArtifact
    v4_awq: ModelArtifact


@pytest.fixture
def family(release_manager: User) -> Family:
    """llama-3:8b → support-chat:v2 (production) → v3 → v4 → v4-awq (quantized)."""
    base = ModelArtifactFactory.create(
        family="llama-3", version="8b", uri="hf://meta-llama/Meta-Llama-3-8B"
    )
    v2 = ModelArtifactFactory.create(version="v2")
    v3 = ModelArtifactFactory.create(version="v3")
    v4 = ModelArtifactFactory.create(
        version="v4",
        uri="s3://models/support-chat/v4/",
        size_bytes=16_060_522_496,
        served_model_name="support-chat",
        training_data_version="tickets-2026-11",
        code_revision="8c1f2e4",
        created_by=release_manager,
    )
    v4_awq = ModelArtifactFactory.create(version="v4-awq", format=ArtifactFormat.OTHER)
    LineageEdgeFactory.create(child=v2, parent=base, relation=Relation.FINETUNE)
    LineageEdgeFactory.create(child=v3, parent=v2, relation=Relation.FINETUNE)
    LineageEdgeFactory.create(child=v4, parent=v3, relation=Relation.FINETUNE)
    LineageEdgeFactory.create(child=v4_awq, parent=v4, relation=Relation.QUANTIZED)
    move(release_manager, v2, "production", reason="first release")
    scores(v2, ("arc_easy", 0.70, 0.01), ("truthfulqa_mc2", 0.50, 0.005))
    scores(v3, ("arc_easy", 0.74, 0.01), ("truthfulqa_mc2", 0.52, 0.005))
    scores(v4, ("arc_easy", 0.75, 0.01), ("truthfulqa_mc2", 0.45, 0.005), ("gsm8k", None, None))
    return Family(base, v2, v3, v4, v4_awq)


def test_an_unknown_artifact_is_a_404(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    assert client.get("/registry/support-chat/v404/").status_code == 404


def test_the_artifact_page_shows_its_metadata_and_alias_badges(
    client: Client, release_manager: User, family: Family
) -> None:
    move(release_manager, family.v4, "candidate")
    client.force_login(release_manager)
    page = client.get("/registry/support-chat/v4/").content.decode()
    assert "<h1>support-chat:v4" in page
    assert '<span class="badges" data-testid="badges"><span class="badge">candidate</span>' in page
    for shown in [
        "s3://models/support-chat/v4/",
        f"sha256:{family.v4.digest}",
        "safetensors",
        "15.0\xa0GB",
        "tickets-2026-11",
        "8c1f2e4",
        "by release-manager",
    ]:
        assert shown in page


def test_the_lineage_graph_draws_parents_above_and_children_below_with_relations(
    client: Client, viewer: User, family: Family
) -> None:
    client.force_login(viewer)
    graph = svg(client.get("/registry/support-chat/v4/").content.decode())
    for label in ["llama-3:8b", "support-chat:v2", "support-chat:v3", "support-chat:v4-awq"]:
        assert f'data-artifact="{label}"' in graph
    assert '<a href="/registry/support-chat/v3/">' in graph
    assert '<a href="/registry/llama-3/8b/">' in graph
    assert ">fine-tune</text>" in graph
    assert ">quantized</text>" in graph

    def top(label: str) -> float:
        match = re.search(rf'data-artifact="{label}">.*?<rect x="[\d.]+" y="([\d.]+)"', graph, re.S)
        assert match is not None
        return float(match.group(1))

    assert (
        top("llama-3:8b")
        < top("support-chat:v2")
        < top("support-chat:v3")
        < top("support-chat:v4")
        < top("support-chat:v4-awq")
    )


def test_the_lineage_graph_marks_the_production_version(
    client: Client, viewer: User, family: Family
) -> None:
    client.force_login(viewer)
    graph = svg(client.get("/registry/support-chat/v4/").content.decode())
    assert '<g class="node production" data-artifact="support-chat:v2">' in graph
    assert '<g class="node root" data-artifact="support-chat:v4">' in graph
    assert '<g class="tag tag-production">' in graph
    assert graph.count("production</text>") == 1


def test_a_long_lineage_is_drawn_to_a_fixed_depth_with_a_note(client: Client, viewer: User) -> None:
    chain = [ModelArtifactFactory.create(version=f"g{n}") for n in range(GRAPH_DEPTH + 2)]
    for parent, child in itertools.pairwise(chain):
        LineageEdgeFactory.create(child=child, parent=parent)
    client.force_login(viewer)
    page = client.get(f"/registry/support-chat/{chain[-1].version}/").content.decode()
    graph = svg(page)
    assert graph.count('<g class="node') == GRAPH_DEPTH + 1
    assert 'data-artifact="support-chat:g1"' in graph
    assert 'data-artifact="support-chat:g0"' not in graph
    assert f"Drawn to {GRAPH_DEPTH} generations either way" in page


def test_an_artifact_without_lineage_draws_itself_alone(client: Client, viewer: User) -> None:
    ModelArtifactFactory.create(version="v1")
    client.force_login(viewer)
    page = client.get("/registry/support-chat/v1/").content.decode()
    assert "No parents or children are recorded" in page
    assert svg(page).count('<g class="node') == 1


def test_the_eval_table_shows_deltas_against_parent_and_production_with_verdicts(
    client: Client, viewer: User, family: Family
) -> None:
    client.force_login(viewer)
    page = client.get("/registry/support-chat/v4/").content.decode()
    assert 'vs parent <a href="/registry/support-chat/v3/">support-chat:v3</a>' in page
    assert 'vs production <a href="/registry/support-chat/v2/">support-chat:v2</a>' in page
    assert row(page, "data-score", "arc_easy/acc") == (
        "arc_easy acc none 0.7500 ± 0.0100 0 +0.0100 within noise +0.0500 improved"
    )
    assert row(page, "data-score", "truthfulqa_mc2/acc") == (
        "truthfulqa_mc2 acc none 0.4500 ± 0.0050 0 -0.0700 regressed -0.0500 regressed"
    )
    assert row(page, "data-score", "gsm8k/acc") == (
        "gsm8k acc none NaN 0 not comparable not comparable"
    )
    assert '<span class="verdict verdict-regressed">regressed</span>' in page


def test_the_production_version_is_compared_with_its_parent_only(
    client: Client, viewer: User, family: Family
) -> None:
    client.force_login(viewer)
    page = client.get("/registry/support-chat/v2/").content.decode()
    assert "This is the production version." in page
    assert row(page, "data-score", "arc_easy/acc").endswith("not comparable —")


def test_the_artifact_page_shows_gate_results_with_reasons(
    client: Client, viewer: User, family: Family
) -> None:
    PromotionGateFactory.create(task="arc_easy", metric="acc", min_value=0.7)
    PromotionGateFactory.create(
        task="truthfulqa_mc2", metric="acc", min_value=None, max_regression=0.02
    )
    client.force_login(viewer)
    page = client.get("/registry/support-chat/v4/").content.decode()
    assert "Promotion gates" in page
    assert row(page, "data-gate", "arc_easy/acc") == "arc_easy acc ≥ 0.7 0.7500 pass passes"
    assert row(page, "data-gate", "truthfulqa_mc2/acc").startswith(
        "truthfulqa_mc2 acc at most 0.02 below production 0.4500 fail regresses 0.05"
    )


def test_a_family_without_gates_shows_no_gate_section(
    client: Client, viewer: User, family: Family
) -> None:
    client.force_login(viewer)
    assert "Promotion gates" not in client.get("/registry/support-chat/v4/").content.decode()


def test_the_alias_history_lists_moves_newest_first(
    client: Client, release_manager: User, family: Family
) -> None:
    move(release_manager, family.v3, "production", reason="v3 beats v2 on arc")
    client.force_login(release_manager)
    page = client.get("/registry/support-chat/v4/").content.decode()
    moves = re.findall(r'<tr data-move="(\d+)">', page)
    newest, oldest = AliasMove.objects.order_by("-created_at", "-id")
    assert moves == [str(newest.pk), str(oldest.pk)]
    assert row(page, "data-move", str(newest.pk)).endswith(
        "release-manager production v2 → v3 v3 beats v2 on arc"
    )
    assert row(page, "data-move", str(oldest.pk)).endswith(
        "release-manager production (new) → v2 first release"
    )


@pytest.mark.parametrize("bigger", [False, True])
def test_the_artifact_page_query_count_is_pinned(
    client: Client,
    release_manager: User,
    family: Family,
    django_assert_num_queries: DjangoAssertNumQueries,
    bigger: bool,
) -> None:
    PromotionGateFactory.create(task="arc_easy", metric="acc", min_value=0.7)
    if bigger:
        # More ancestors, children, scores, aliases and history change nothing.
        for n in range(10):
            child = ModelArtifactFactory.create(version=f"v4-ft{n}")
            LineageEdgeFactory.create(child=child, parent=family.v4, relation=Relation.ADAPTER)
            move(release_manager, child, f"canary-{n}")
        grand = ModelArtifactFactory.create(family="mistral", version="7b")
        LineageEdgeFactory.create(child=family.base, parent=grand, relation=Relation.DISTILLED)
        scores(family.v4, *[(f"task_{n}", 0.5, 0.01) for n in range(20)])
    client.force_login(release_manager)
    # session, user, artifact; lineage (both ways and the rows in one); aliases; comparison:
    # parent, production, the scores of all three; gates: gates, production, the scores of both;
    # history. (gates_check reads again two things score_comparison has just read.)
    with django_assert_num_queries(12):
        assert client.get("/registry/support-chat/v4/").status_code == 200


# --- moving an alias ------------------------------------------------------------------------------


def test_a_release_manager_sees_the_move_form(
    client: Client, release_manager: User, family: Family
) -> None:
    client.force_login(release_manager)
    page = client.get("/registry/support-chat/v4/").content.decode()
    assert 'action="/registry/support-chat/v4/alias/"' in page
    assert '<datalist id="alias-names"><option value="production"></option></datalist>' in page


@pytest.mark.parametrize("actor", ["viewer", "tenant_a_admin"])
def test_only_release_managers_may_move_aliases(
    client: Client, request: pytest.FixtureRequest, family: Family, actor: str
) -> None:
    client.force_login(request.getfixturevalue(actor))
    page = client.get("/registry/support-chat/v4/").content.decode()
    assert "/alias/" not in page
    assert 'name="reason"' not in page
    data = {"name": "production", "reason": "mine", "expected": "v2", "confirm": "yes"}
    response = client.post("/registry/support-chat/v4/alias/", data)
    assert response.status_code == 403
    assert Alias.objects.get(name="production").artifact == family.v2


def test_moving_an_alias_shows_the_change_to_confirm_first(
    client: Client, release_manager: User, family: Family
) -> None:
    client.force_login(release_manager)
    response = client.post(
        "/registry/support-chat/v4/alias/", {"name": "production", "reason": "v4 passes"}
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "production: support-chat:v2 → support-chat:v4" in page
    assert '<input type="hidden" name="expected" value="v2">' in page
    assert '<input type="hidden" name="confirm" value="yes">' in page
    assert Alias.objects.get(name="production").artifact == family.v2
    assert AliasMove.objects.count() == 1


def test_confirming_moves_the_alias_and_records_who_and_why(
    client: Client, release_manager: User, family: Family
) -> None:
    client.force_login(release_manager)
    data = {"name": "production", "reason": "v4 passes", "expected": "v2", "confirm": "yes"}
    response = client.post("/registry/support-chat/v4/alias/", data, follow=True)
    assert response.redirect_chain == [("/registry/support-chat/v4/", 302)]
    assert Alias.objects.get(name="production").artifact == family.v4
    latest = AliasMove.objects.order_by("-created_at", "-id").first()
    assert latest is not None
    assert (latest.from_artifact, latest.to_artifact) == (family.v2, family.v4)
    assert (latest.actor, latest.reason) == (release_manager, "v4 passes")
    page = response.content.decode()
    assert "support-chat@production now points at support-chat:v4." in page
    assert '<span class="badge badge-production">production</span>' in page.split("</h1>")[0]


def test_a_new_alias_is_created_through_the_same_confirmation(
    client: Client, release_manager: User, family: Family
) -> None:
    client.force_login(release_manager)
    first = client.post(
        "/registry/support-chat/v4/alias/", {"name": "candidate", "reason": "nightly winner"}
    )
    assert "candidate: (new alias) → support-chat:v4" in first.content.decode()
    data = {"name": "candidate", "reason": "nightly winner", "expected": "", "confirm": "yes"}
    client.post("/registry/support-chat/v4/alias/", data)
    assert Alias.objects.get(name="candidate").artifact == family.v4


@pytest.mark.parametrize("reason", ["", "   "])
def test_a_move_without_a_reason_is_refused_with_a_message(
    client: Client, release_manager: User, family: Family, reason: str
) -> None:
    client.force_login(release_manager)
    for data in [
        {"name": "production", "reason": reason},
        {"name": "production", "reason": reason, "expected": "v2", "confirm": "yes"},
    ]:
        response = client.post("/registry/support-chat/v4/alias/", data)
        assert response.status_code == 200
        page = response.content.decode()
        assert "Say why the alias moves: the reason is kept in its history." in page
        assert "→ support-chat:v4</p>" not in page
    assert Alias.objects.get(name="production").artifact == family.v2


def test_a_move_over_an_alias_that_moved_since_the_confirmation_asks_again(
    client: Client, release_manager: User, family: Family
) -> None:
    client.force_login(release_manager)
    move(release_manager, family.v3, "production", reason="someone else, meanwhile")
    data = {"name": "production", "reason": "v4 passes", "expected": "v2", "confirm": "yes"}
    page = client.post("/registry/support-chat/v4/alias/", data).content.decode()
    assert "support-chat@production has moved since you looked" in page
    assert "production: support-chat:v3 → support-chat:v4" in page
    assert Alias.objects.get(name="production").artifact == family.v3


def test_a_domain_error_from_the_service_is_shown_in_the_form_not_a_500(
    client: Client, release_manager: User, family: Family, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The form already catches what alias_move refuses today; this pins the mapping for
    # whatever rule the service adds next.
    def refuse(**kwargs: object) -> None:
        raise DomainError("support-chat is frozen during the incident")

    monkeypatch.setattr(services, "alias_move", refuse)
    client.force_login(release_manager)
    data = {"name": "production", "reason": "v4 passes", "expected": "v2", "confirm": "yes"}
    response = client.post("/registry/support-chat/v4/alias/", data)
    assert response.status_code == 200
    assert '<div class="error" role="alert"><p>support-chat is frozen during the incident' in (
        response.content.decode()
    )


def test_moving_an_alias_of_an_unknown_artifact_is_a_404(
    client: Client, release_manager: User
) -> None:
    client.force_login(release_manager)
    data = {"name": "production", "reason": "x", "confirm": "yes"}
    assert client.post("/registry/support-chat/nope/alias/", data).status_code == 404


def test_the_move_is_csrf_protected(release_manager: User, family: Family) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(release_manager)
    data = {"name": "production", "reason": "v4 passes", "expected": "v2", "confirm": "yes"}
    assert client.post("/registry/support-chat/v4/alias/", data).status_code == 403
    assert Alias.objects.get(name="production").artifact == family.v2


def test_the_move_accepts_only_posts(client: Client, release_manager: User, family: Family) -> None:
    client.force_login(release_manager)
    assert client.get("/registry/support-chat/v4/alias/").status_code == 405


def test_with_htmx_the_confirmation_is_a_fragment_and_the_move_swaps_the_page(
    client: Client, release_manager: User, family: Family
) -> None:
    client.force_login(release_manager)
    url = "/registry/support-chat/v4/alias/"
    confirm = client.post(url, {"name": "production", "reason": "v4 passes"}, headers=HTMX)
    body = confirm.content.decode()
    assert body.lstrip().startswith('<div id="alias-move"')
    assert "<html" not in body
    assert "production: support-chat:v2 → support-chat:v4" in body

    data = {"name": "production", "reason": "v4 passes", "expected": "v2", "confirm": "yes"}
    moved = client.post(url, data, headers=HTMX)
    body = moved.content.decode()
    assert moved.status_code == 200
    assert (moved["HX-Retarget"], moved["HX-Reswap"]) == ("#artifact-page", "outerHTML")
    assert body.lstrip().startswith('<div id="artifact-page"')
    assert "support-chat@production now points at support-chat:v4." in body
    assert '<g class="node root production" data-artifact="support-chat:v4">' in body


def test_with_htmx_a_missing_reason_returns_the_form_with_its_message(
    client: Client, release_manager: User, family: Family
) -> None:
    client.force_login(release_manager)
    response = client.post(
        "/registry/support-chat/v4/alias/", {"name": "production", "reason": ""}, headers=HTMX
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="alias-move"')
    assert "Say why the alias moves" in body
    assert 'value="production"' in body


def test_a_move_to_where_the_alias_already_points_offers_nothing_to_confirm(
    client: Client, release_manager: User, family: Family
) -> None:
    client.force_login(release_manager)
    response = client.post(
        "/registry/support-chat/v2/alias/", {"name": "production", "reason": "again"}
    )
    page = response.content.decode()
    assert "production already points at support-chat:v2: nothing would change." in page
    assert 'name="confirm"' not in page
