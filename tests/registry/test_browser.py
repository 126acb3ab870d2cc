"""The artifact page in a real browser: the lineage graph and an alias move through confirmation."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from registry import services
from registry.choices import Relation
from tenants.choices import Role
from tests.browser import page  # noqa: F401 -- fixture
from tests.factories import (
    PASSWORD,
    EvalScoreFactory,
    LineageEdgeFactory,
    ModelArtifactFactory,
    UserFactory,
)


def test_a_release_manager_moves_production_through_the_confirmation_step(
    page: Page,  # noqa: F811
    live_server: LiveServer,
    transactional_db: None,
) -> None:
    manager = UserFactory.create(username="rm", role=Role.RELEASE_MANAGER)
    base = ModelArtifactFactory.create(family="llama-3", version="8b")
    v3 = ModelArtifactFactory.create(version="v3")
    v4 = ModelArtifactFactory.create(version="v4")
    LineageEdgeFactory.create(child=v3, parent=base, relation=Relation.FINETUNE)
    LineageEdgeFactory.create(child=v4, parent=v3, relation=Relation.FINETUNE)
    EvalScoreFactory.create(run__artifact=v4, value=0.78)
    services.alias_move(
        actor=manager, family="support-chat", name="production", artifact=v3, reason="launch"
    )

    page.goto(f"{live_server.url}/login/?next=/registry/support-chat/v4/")
    page.get_by_label("Username").fill("rm")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("support-chat:v4")

    graph = page.locator("svg.lineage")
    expect(graph).to_be_visible()
    parent = graph.locator('g.node.production[data-artifact="support-chat:v3"]')
    expect(parent).to_be_visible()
    expect(parent.locator("text.label")).to_have_text("support-chat:v3")
    expect(graph.locator("text.relation").first).to_have_text("fine-tune")
    expect(page.get_by_test_id("badges")).to_have_text("")

    page.get_by_label("Alias").fill("production")
    page.get_by_label("Reason").fill("v4 wins arc_easy")
    page.get_by_role("button", name="Review the move").click()
    expect(page.get_by_test_id("alias-change")).to_have_text(
        "production: support-chat:v3 → support-chat:v4"
    )
    assert page.url == f"{live_server.url}/registry/support-chat/v4/"  # swapped, not navigated

    page.get_by_role("button", name="Move production").click()
    expect(page.get_by_role("status")).to_have_text(
        "support-chat@production now points at support-chat:v4."
    )
    expect(page.get_by_test_id("badges")).to_have_text("production")
    expect(graph.locator('g.node.root.production[data-artifact="support-chat:v4"]')).to_be_visible()
    history = page.locator("table.history tbody tr").first
    expect(history).to_contain_text("rm")
    expect(history).to_contain_text("v3 → v4")
    expect(history).to_contain_text("v4 wins arc_easy")


def test_typing_in_the_search_refreshes_the_rows_and_the_address(
    page: Page,  # noqa: F811
    live_server: LiveServer,
    transactional_db: None,
) -> None:
    UserFactory.create(username="viewer", role=Role.VIEWER)
    ModelArtifactFactory.create(version="v1")
    ModelArtifactFactory.create(family="llama-3", version="8b")

    page.goto(f"{live_server.url}/login/?next=/registry/")
    page.get_by_label("Username").fill("viewer")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_test_id("artifact-count")).to_have_text("2 artifacts")

    page.get_by_label("Search").press_sequentially("llama")
    expect(page.get_by_test_id("artifact-count")).to_have_text("1 artifact")
    expect(page.locator("tr[data-artifact]")).to_have_text(re.compile(r"llama-3:8b"))
    expect(page).to_have_url(re.compile(r"/registry/\?q=llama"))

    page.get_by_label("Family").select_option("support-chat")
    expect(page.get_by_test_id("artifact-count")).to_have_text("0 artifacts")
    expect(page).to_have_url(re.compile(r"q=llama&family=support-chat"))
