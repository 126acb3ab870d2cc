"""The rollouts' pages: list, a rollout's live page, the manual controls and the create form."""

from __future__ import annotations

import html
import re

import pytest
import redis
from django.test import Client
from pytest_django import DjangoAssertNumQueries

from registry.models import GateOverride
from rollouts.choices import RolloutState
from rollouts.models import Deployment, Rollout, RolloutEvent, Route
from rollouts.plans import Plan, Step
from rollouts.services.rollouts import rollout_control, rollout_create
from tenants.models import User
from tests.conftest import stored
from tests.factories import DeploymentFactory, EvalScoreFactory, PromotionGateFactory, RouteFactory
from tests.registry.factories import register

S = RolloutState
HTMX = {"HX-Request": "true"}
PLAN = Plan(
    steps=(
        Step(weight=5, min_bake_s=30, min_samples=50),
        Step(weight=50, min_bake_s=60, min_samples=100),
        Step(weight=100, min_bake_s=90, min_samples=150),
    )
)


@pytest.fixture
def plan() -> Plan:
    return PLAN


def act(rollout: Rollout, manager: User, action: str, reason: str = "by hand") -> Rollout:
    return rollout_control(actor=manager, rollout_id=rollout.pk, action=action, reason=reason)


def text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def row(page: str, attribute: str, value: str) -> str:
    """The text of the table row marked `attribute="value"`, tags stripped."""
    match = re.search(rf'<tr {attribute}="{re.escape(value)}">(.*?)</tr>', page, re.DOTALL)
    assert match is not None, f"no row {attribute}={value}"
    return text(match.group(1))


def element(page: str, tag: str, attribute: str, value: str) -> str:
    """The opening tag of the element marked `attribute="value"`."""
    match = re.search(rf'<{tag}[^>]*\b{attribute}="{re.escape(value)}"[^>]*>', page)
    assert match is not None, f"no <{tag} {attribute}={value}>"
    return match.group(0)


def steps(page: str) -> list[str]:
    return re.findall(r'<li class="step step-(\w+)" data-step="\d"', page)


def buttons(page: str) -> list[str]:
    return re.findall(r'<button type="submit" name="action" value="(\w+)"', page)


def ended(route: Route, version: str, to: RolloutState) -> Rollout:
    """A rollout of a new candidate on `route` that has already ended in `to`."""
    candidate = DeploymentFactory.create(
        artifact=register(version=version),
        fleet=route.baseline.fleet,
        served_model_name=f"chat-{version}",
        state="ready",
    )
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    # Straight to the end: the list cares about the state, not the road there.
    Rollout.objects.filter(pk=rollout.pk).update(state=to)
    return Rollout.objects.get(pk=rollout.pk)


# --- the list -------------------------------------------------------------------------------------


def test_rollouts_require_a_login(client: Client, db: None) -> None:
    response = client.get("/rollouts/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=/rollouts/")


@pytest.mark.parametrize("actor", ["release_manager", "tenant_a_admin", "viewer"])
def test_every_role_reads_the_list_and_a_rollout_page(
    client: Client, request: pytest.FixtureRequest, running: Rollout, actor: str
) -> None:
    client.force_login(request.getfixturevalue(actor))
    assert client.get("/rollouts/").status_code == 200
    assert client.get(f"/rollouts/{running.pk}/").status_code == 200


def test_the_nav_links_to_rollouts(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    page = client.get("/rollouts/").content.decode()
    assert '<a href="/rollouts/">Rollouts</a>' in page


def test_the_list_shows_live_rollouts_first_then_the_newest(
    client: Client, route: Route, running: Rollout, viewer: User
) -> None:
    other = RouteFactory.create(name="other", baseline=route.baseline)
    old = ended(other, "v3", S.ROLLED_BACK)
    new = ended(other, "v4", S.PROMOTED)
    client.force_login(viewer)
    page = client.get("/rollouts/").content.decode()
    assert re.findall(r'<tr data-rollout="(\d+)">', page) == [
        str(running.pk),
        str(new.pk),
        str(old.pk),
    ]
    assert row(page, "data-rollout", str(running.pk)) == (
        f"{running.pk} chat support-chat:v2 replaces support-chat:v1 Running 1 of 3 5% "
        + running.created_at.strftime("%Y-%m-%d %H:%M")
    )
    assert "Rolled back" in row(page, "data-rollout", str(old.pk))
    assert "Promoted — 100%" in row(page, "data-rollout", str(new.pk))


@pytest.mark.parametrize(
    ("state", "listed"),
    [("", {"running", "old"}), ("live", {"running"}), ("terminal", {"old"})],
)
def test_the_state_filter_narrows_the_list(
    client: Client, route: Route, running: Rollout, viewer: User, state: str, listed: set[str]
) -> None:
    old = ended(RouteFactory.create(name="other", baseline=route.baseline), "v3", S.ABORTED)
    ids = {"running": str(running.pk), "old": str(old.pk)}
    client.force_login(viewer)
    page = client.get("/rollouts/", {"state": state} if state else {}).content.decode()
    assert set(re.findall(r'<tr data-rollout="(\d+)">', page)) == {ids[name] for name in listed}


def test_the_state_tabs_are_links_that_htmx_follows_for_the_rows_only(
    client: Client, running: Rollout, viewer: User
) -> None:
    client.force_login(viewer)
    page = client.get("/rollouts/", {"state": "live"}).content.decode()
    live_tab = element(page, "a", "href", "/rollouts/?state=live")
    assert 'hx-get="/rollouts/?state=live"' in live_tab
    assert 'hx-target="#rollout-rows"' in live_tab
    assert 'class="active"' in live_tab
    fragment = client.get("/rollouts/", {"state": "live"}, headers=HTMX)
    body = fragment.content.decode()
    assert body.lstrip().startswith('<section id="rollout-rows"')
    assert "<html" not in body
    assert fragment["Vary"] == "HX-Request, Cookie"


def test_an_unknown_state_filter_is_ignored_and_flagged(
    client: Client, running: Rollout, viewer: User
) -> None:
    client.force_login(viewer)
    response = client.get("/rollouts/", {"state": "bogus"})
    assert response.status_code == 200
    assert "(that filter is ignored)" in response.content.decode()
    assert f'<tr data-rollout="{running.pk}">' in response.content.decode()


def test_the_list_query_count_does_not_grow_with_the_rows(
    client: Client,
    route: Route,
    running: Rollout,
    viewer: User,
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    client.force_login(viewer)
    with django_assert_num_queries(4):  # session, user, count, rows
        client.get("/rollouts/")
    other = RouteFactory.create(name="other", baseline=route.baseline)
    for version in ("v3", "v4", "v5"):
        ended(other, version, S.ABORTED)
    with django_assert_num_queries(4):
        client.get("/rollouts/")


# --- a rollout's page -----------------------------------------------------------------------------


def test_an_unknown_rollout_is_a_404(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    assert client.get("/rollouts/999999/").status_code == 404


def test_the_page_shows_the_timeline_with_the_current_step_highlighted(
    client: Client, running: Rollout, release_manager: User
) -> None:
    client.force_login(release_manager)
    page = client.get(f"/rollouts/{running.pk}/").content.decode()
    assert steps(page) == ["current", "todo", "todo"]
    assert 'data-step="1" aria-current="step"' in page
    timeline = re.findall(r'<li class="step[^"]*" data-step="\d"[^>]*>(.*?)</li>', page, re.DOTALL)
    assert [text(item) for item in timeline] == [
        "1 5% bake 30 s · 50 samples",
        "2 50% bake 60 s · 100 samples",
        "3 100% bake 90 s · 150 samples",
    ]
    act(running, release_manager, "skip")
    page = client.get(f"/rollouts/{running.pk}/").content.decode()
    assert steps(page) == ["done", "current", "todo"]
    assert "✓" in page
    assert "step 2 of 3" in page


def test_the_timeline_ticks_every_step_of_a_promoted_rollout_and_crosses_a_rolled_back_one(
    client: Client, running: Rollout, release_manager: User
) -> None:
    client.force_login(release_manager)
    act(running, release_manager, "skip")
    act(running, release_manager, "rollback")
    assert steps(client.get(f"/rollouts/{running.pk}/").content.decode()) == [
        "done",
        "stopped",
        "todo",
    ]


def test_the_page_shows_the_current_weights(
    client: Client, running: Rollout, release_manager: User
) -> None:
    client.force_login(release_manager)
    page = client.get(f"/rollouts/{running.pk}/").content.decode()
    assert "baseline 95% · " in text(page)
    assert "candidate 5%" in text(page)
    assert 'class="weight-canary" style="width: 5%"' in page
    act(running, release_manager, "skip")
    page = client.get(f"/rollouts/{running.pk}/").content.decode()
    assert "baseline 50% · candidate 50%" in text(page)


def test_the_page_shows_samples_per_arm_against_the_slo_gates(
    client: Client, running: Rollout, viewer: User
) -> None:
    stored(running, "baseline", 40, short=True, ttft_ms=100)
    stored(running, "canary", 30, short=True, ttft_ms=400)
    client.force_login(viewer)
    page = client.get(f"/rollouts/{running.pk}/").content.decode()
    assert row(page, "data-row", "samples") == "Samples — 40 30"
    assert row(page, "data-row", "ttft-p95") == "TTFT p95 ≤ 300 ms 100 ms 400 ms"
    assert row(page, "data-row", "error-rate") == "Error rate ≤ 5.0% 0.0% 0.0%"
    ttft = re.search(r'<tr data-row="ttft-p95">(.*?)</tr>', page, re.DOTALL)
    assert ttft is not None
    assert re.findall(r'class="num (gate-\w+)"', ttft.group(1)) == ["gate-pass", "gate-fail"]
    # What the tick would do with these samples: every one of the candidate's 30 requests is
    # over the TTFT gate, a breach beyond doubt.
    guardrail = re.search(r'data-testid="guardrail">(.*?)</dd>', page, re.DOTALL)
    assert guardrail is not None
    reason = text(guardrail.group(1))
    assert reason.startswith("rollback TTFT p95 over 300 ms")
    assert "100.0% (30 of 30) is above its 5.0% limit beyond doubt" in reason
    assert "30 of 50 candidate samples needed" in text(page)


def test_a_healthy_step_shows_it_is_baking_and_the_judges_interim_look(
    client: Client, running: Rollout, viewer: User
) -> None:
    stored(running, "canary", 5, short=True, step=None)
    client.force_login(viewer)
    page = client.get(f"/rollouts/{running.pk}/").content.decode()
    assert '<span class="decision decision-hold">hold</span> baking' in page
    assert "continue (interim look at step 1)" in page
    assert f'<a href="/rollouts/{running.pk}/report/">A/B report</a>' in page


def test_the_event_log_shows_every_change_with_actor_reason_and_evidence(
    client: Client, running: Rollout, release_manager: User
) -> None:
    act(running, release_manager, "pause", "looking at a dashboard")
    RolloutEvent.objects.filter(to_state=S.PAUSED).update(evidence={"canary": {"samples": 12}})
    client.force_login(release_manager)
    page = client.get(f"/rollouts/{running.pk}/").content.decode()
    events = list(running.events.order_by("-created_at", "-id"))
    assert re.findall(r'<tr data-event="(\d+)">', page) == [str(e.pk) for e in events]
    paused = row(page, "data-event", str(events[0].pk))
    assert "Running → Paused 1 release-manager pause: looking at a dashboard" in paused
    assert "evidence {'canary': {'samples': 12}}" in paused
    assert "<details><summary>evidence</summary>" in page
    started = row(page, "data-event", str(events[-1].pk))
    assert "Pending → Preflight 1 system start" in started


def test_a_live_rollout_polls_its_live_part_every_two_seconds(
    client: Client, running: Rollout, viewer: User
) -> None:
    client.force_login(viewer)
    page = client.get(f"/rollouts/{running.pk}/").content.decode()
    live = element(page, "div", "id", "rollout-live")
    assert f'hx-get="/rollouts/{running.pk}/?seen=running%3A0"' in live
    assert 'hx-trigger="every 2s"' in live
    assert f'<a href="/rollouts/{running.pk}/" class="muted refresh"' in page
    poll = client.get(f"/rollouts/{running.pk}/?seen=running%3A0", headers=HTMX)
    assert poll.status_code == 200
    body = poll.content.decode()
    assert body.lstrip().startswith('<div id="rollout-live"')
    assert 'hx-trigger="every 2s"' in body
    assert "<html" not in body
    assert "rollout-controls" not in body  # nothing changed under the controls
    assert poll["Vary"] == "HX-Request, Cookie"


def test_a_poll_that_finds_the_rollout_ended_answers_286_without_a_trigger(
    client: Client, running: Rollout, release_manager: User
) -> None:
    client.force_login(release_manager)
    act(running, release_manager, "rollback", "the candidate is slow")
    poll = client.get(f"/rollouts/{running.pk}/?seen=running%3A0", headers=HTMX)
    assert poll.status_code == 286
    body = poll.content.decode()
    assert 'data-testid="rollout-state">Rolled back<' in body
    assert "hx-trigger" not in body
    assert "rollback: the candidate is slow" in body
    # The controls, drawn for a running rollout, are taken away out of band.
    assert '<section id="rollout-controls" hx-swap-oob="true">' in body
    assert buttons(body) == []


def test_an_ended_rollouts_page_does_not_poll(
    client: Client, running: Rollout, release_manager: User
) -> None:
    act(running, release_manager, "promote")
    client.force_login(release_manager)
    page = client.get(f"/rollouts/{running.pk}/").content.decode()
    assert "hx-trigger" not in page
    assert steps(page) == ["done", "done", "done"]
    assert "baseline 0% · candidate 100%" in text(page)


def test_a_poll_redraws_the_controls_when_the_state_changed_under_them(
    client: Client, running: Rollout, release_manager: User
) -> None:
    act(running, release_manager, "pause")
    client.force_login(release_manager)
    body = client.get(f"/rollouts/{running.pk}/?seen=running%3A0", headers=HTMX).content.decode()
    assert '<section id="rollout-controls" hx-swap-oob="true">' in body
    assert buttons(body) == ["resume", "promote", "rollback", "abort"]
    assert "?seen=paused%3A0" in body


def test_the_page_query_count_is_pinned(
    client: Client,
    running: Rollout,
    release_manager: User,
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    act(running, release_manager, "pause")
    act(running, release_manager, "resume")
    client.force_login(release_manager)
    # session, user, rollout, 2 step stats, events, and the decision's reads: the samples,
    # feedback and entered costs (one read for the guardrails and the A/B judge's look, shared
    # by the decision and the verdict), whether a person resumed the step and whether the step
    # had its scheduled look
    with django_assert_num_queries(11):
        client.get(f"/rollouts/{running.pk}/")
    with django_assert_num_queries(11):
        client.get(f"/rollouts/{running.pk}/?seen=running%3A0", headers=HTMX)


# --- manual controls ------------------------------------------------------------------------------


def test_a_release_manager_sees_the_actions_valid_in_each_state(
    client: Client, running: Rollout, release_manager: User
) -> None:
    client.force_login(release_manager)

    def shown() -> list[str]:
        return buttons(client.get(f"/rollouts/{running.pk}/").content.decode())

    assert shown() == ["pause", "skip", "promote", "rollback", "abort"]
    act(running, release_manager, "pause")
    assert shown() == ["resume", "promote", "rollback", "abort"]
    act(running, release_manager, "resume")
    act(running, release_manager, "skip")
    act(running, release_manager, "skip")
    assert shown() == ["pause", "promote", "rollback", "abort"]  # the last step: nothing to skip
    act(running, release_manager, "abort")
    assert shown() == []


@pytest.mark.parametrize("actor", ["viewer", "tenant_a_admin"])
def test_other_roles_see_no_controls(
    client: Client, request: pytest.FixtureRequest, running: Rollout, actor: str
) -> None:
    client.force_login(request.getfixturevalue(actor))
    page = client.get(f"/rollouts/{running.pk}/").content.decode()
    assert buttons(page) == []
    assert "/actions/" not in page


@pytest.mark.parametrize("actor", ["viewer", "tenant_a_admin"])
def test_other_roles_may_not_post_an_action(
    client: Client, request: pytest.FixtureRequest, running: Rollout, actor: str
) -> None:
    client.force_login(request.getfixturevalue(actor))
    response = client.post(
        f"/rollouts/{running.pk}/actions/", {"action": "rollback", "reason": "x"}
    )
    assert response.status_code == 403
    assert Rollout.objects.get(pk=running.pk).state == S.RUNNING


def test_pause_then_resume_through_the_page(
    client: Client, running: Rollout, release_manager: User
) -> None:
    client.force_login(release_manager)
    url = f"/rollouts/{running.pk}/actions/"
    response = client.post(url, {"action": "pause", "reason": "dashboards look odd"})
    assert response.status_code == 302
    assert response["Location"] == f"/rollouts/{running.pk}/"
    assert Rollout.objects.get(pk=running.pk).state == S.PAUSED
    page = client.get(response["Location"]).content.decode()
    assert '<p class="message message-success" role="status">Pause: done.</p>' in page

    response = client.post(url, {"action": "resume", "reason": "false alarm"}, headers=HTMX)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="rollout-page">')
    assert "Resume: done." in body
    assert 'data-testid="rollout-state">Running<' in body
    assert 'hx-trigger="every 2s"' in body
    reasons = list(running.events.values_list("reason", flat=True))
    assert reasons[-2:] == ["pause: dashboards look odd", "resume: false alarm"]


def test_a_rollback_through_the_page_stops_the_polling(
    client: Client, running: Rollout, release_manager: User
) -> None:
    client.force_login(release_manager)
    response = client.post(
        f"/rollouts/{running.pk}/actions/",
        {"action": "rollback", "reason": "TTFT doubled"},
        headers=HTMX,
    )
    body = response.content.decode()
    rollout = Rollout.objects.get(pk=running.pk)
    assert rollout.state == S.ROLLED_BACK
    assert rollout.route.canary_weight == 0
    assert 'data-testid="rollout-state">Rolled back<' in body
    assert "hx-trigger" not in body
    assert buttons(body) == []
    assert "rollback: TTFT doubled" in body


@pytest.mark.parametrize("reason", ["", "   "])
def test_an_action_needs_a_reason(
    client: Client, running: Rollout, release_manager: User, reason: str
) -> None:
    client.force_login(release_manager)
    url = f"/rollouts/{running.pk}/actions/"
    response = client.post(url, {"action": "rollback", "reason": reason})
    assert response.status_code == 400
    assert (
        "Say why: the reason is kept in the rollout&#x27;s event log." in response.content.decode()
    )
    body = client.post(url, {"action": "rollback", "reason": reason}, headers=HTMX).content.decode()
    assert 'aria-invalid="true"' in body
    assert Rollout.objects.get(pk=running.pk).state == S.RUNNING


def test_an_action_the_state_forbids_is_a_message_not_a_500(
    client: Client, running: Rollout, release_manager: User
) -> None:
    client.force_login(release_manager)
    url = f"/rollouts/{running.pk}/actions/"
    response = client.post(url, {"action": "resume", "reason": "go"}, headers=HTMX)
    assert response.status_code == 200
    assert (
        f'<p class="message message-error" role="alert">rollout {running.pk} is running, '
        "not paused</p>"
    ) in response.content.decode()
    assert client.post(url, {"action": "resume", "reason": "go"}).status_code == 400
    response = client.post(url, {"action": "yolo", "reason": "go"})
    assert response.status_code == 400
    assert "Select a valid choice." in response.content.decode()


def test_an_action_on_an_unknown_rollout_is_a_404(client: Client, release_manager: User) -> None:
    client.force_login(release_manager)
    response = client.post("/rollouts/999999/actions/", {"action": "pause", "reason": "x"})
    assert response.status_code == 404


def test_actions_are_csrf_protected(running: Rollout, release_manager: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(release_manager)
    response = client.post(f"/rollouts/{running.pk}/actions/", {"action": "abort", "reason": "x"})
    assert response.status_code == 403
    assert Rollout.objects.get(pk=running.pk).state == S.RUNNING


# --- creating one ---------------------------------------------------------------------------------


@pytest.mark.parametrize("actor", ["viewer", "tenant_a_admin"])
def test_only_release_managers_may_create(
    client: Client, request: pytest.FixtureRequest, route: Route, candidate: Deployment, actor: str
) -> None:
    client.force_login(request.getfixturevalue(actor))
    assert client.get("/rollouts/new/").status_code == 403
    data = {"route": route.pk, "candidate": candidate.pk, "create": "1"}
    assert client.post("/rollouts/new/", data).status_code == 403
    assert not Rollout.objects.exists()


def test_the_list_links_to_the_form_for_release_managers_only(
    client: Client, release_manager: User, viewer: User
) -> None:
    client.force_login(viewer)
    assert 'href="/rollouts/new/"' not in client.get("/rollouts/").content.decode()
    client.force_login(release_manager)
    assert 'href="/rollouts/new/"' in client.get("/rollouts/").content.decode()


def test_the_form_offers_live_candidates_and_the_default_plan_but_no_create_button_yet(
    client: Client, route: Route, candidate: Deployment, release_manager: User
) -> None:
    DeploymentFactory.create(
        artifact=register(version="v0"),
        fleet=route.baseline.fleet,
        served_model_name="chat-v0",
        state="retired",
    )
    client.force_login(release_manager)
    page = client.get("/rollouts/new/").content.decode()
    assert f'<option value="{candidate.pk}">support-chat:v2 · fleet · chat-v2</option>' in page
    assert "chat-v0" not in page
    assert f'<option value="{route.pk}">chat (baseline support-chat:v1)</option>' in page
    assert 'hx-get="/rollouts/new/"' in page
    assert [row(page, "data-step", str(n)) for n in (1, 2, 3, 4)] == ["1", "2", "3", "4"]
    assert re.findall(r'name="step_\d_weight" value="([^"]*)"', page) == ["5", "25", "50", "100"]
    assert re.findall(r'name="step_\d_bake" value="([^"]*)"', page) == ["300"] * 4
    assert re.findall(r'name="step_\d_samples" value="([^"]*)"', page) == ["200"] * 4
    assert "Create and start" not in page
    assert 'name="check"' in page  # the way to see the gates without JS


def test_choosing_a_candidate_shows_its_passing_gates_then_the_create_button(
    client: Client, candidate: Deployment, release_manager: User
) -> None:
    PromotionGateFactory.create(task="arc_easy", metric="acc", min_value=0.7)
    EvalScoreFactory.create(run__artifact=candidate.artifact, value=0.75)
    client.force_login(release_manager)
    response = client.get("/rollouts/new/", {"candidate": candidate.pk}, headers=HTMX)
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="candidate-gates">')
    assert row(body, "data-gate", "arc_easy/acc") == "arc_easy acc pass passes"
    assert "Create and start" in body
    assert "override_reason" not in body


def test_a_candidate_failing_its_gates_needs_an_override_reason(
    client: Client, route: Route, candidate: Deployment, release_manager: User
) -> None:
    PromotionGateFactory.create(task="arc_easy", metric="acc", min_value=0.7)
    client.force_login(release_manager)
    page = client.post(
        "/rollouts/new/", {"route": route.pk, "candidate": candidate.pk, "check": "1"}
    ).content.decode()
    assert row(page, "data-gate", "arc_easy/acc") == "arc_easy acc fail no score for arc_easy/acc"
    assert '<span class="verdict verdict-regressed">fail</span></h3>' in page
    assert 'name="override_reason" rows="2" required' in page
    assert "Create and start" in page
    assert 'class="error"' not in page  # checking the gates is not a submission

    data = {"route": route.pk, "candidate": candidate.pk, "create": "1"}
    response = client.post("/rollouts/new/", data)
    assert response.status_code == 400
    assert "say why it may roll out anyway" in response.content.decode()
    assert not Rollout.objects.exists()

    response = client.post("/rollouts/new/", data | {"override_reason": "hotfix for a CVE"})
    rollout = Rollout.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/rollouts/{rollout.pk}/"
    assert GateOverride.objects.get().reason == "hotfix for a CVE"


def test_creating_a_rollout_starts_it_with_the_edited_plan(
    client: Client,
    route: Route,
    candidate: Deployment,
    release_manager: User,
    redis_client: redis.Redis,
) -> None:
    client.force_login(release_manager)
    data = {
        "route": route.pk,
        "candidate": candidate.pk,
        "create": "1",
        **{f"step_{i}_weight": w for i, w in enumerate(["10", "", "50", "100"])},
        **{f"step_{i}_bake": "20" for i in range(4)},
        **{f"step_{i}_samples": "30" for i in range(4)},
    }
    response = client.post("/rollouts/new/", data)
    rollout = Rollout.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/rollouts/{rollout.pk}/"
    assert rollout.state == S.RUNNING
    assert rollout.created_by == release_manager
    assert rollout.parsed_plan == Plan(
        steps=tuple(Step(weight=w, min_bake_s=20, min_samples=30) for w in (10, 50, 100))
    )
    page = client.get(response["Location"]).content.decode()
    assert f"Rollout {rollout.pk} started." in page
    assert steps(page) == ["current", "todo", "todo"]


def test_an_invalid_plan_is_shown_not_created(
    client: Client, route: Route, candidate: Deployment, release_manager: User
) -> None:
    client.force_login(release_manager)
    data = {
        "route": route.pk,
        "candidate": candidate.pk,
        "create": "1",
        **{f"step_{i}_weight": w for i, w in enumerate(["50", "25", "75", "90"])},
    }
    response = client.post("/rollouts/new/", data)
    assert response.status_code == 400
    body = html.unescape(response.content.decode())
    assert "The plan is not valid: Value error, step weights must strictly increase" in body
    assert not Rollout.objects.exists()


def test_a_route_with_a_live_rollout_is_refused_with_a_message(
    client: Client, route: Route, running: Rollout, release_manager: User
) -> None:
    other = DeploymentFactory.create(
        artifact=register(version="v3"), fleet=route.baseline.fleet, served_model_name="chat-v3"
    )
    client.force_login(release_manager)
    response = client.post(
        "/rollouts/new/", {"route": route.pk, "candidate": other.pk, "create": "1"}
    )
    assert response.status_code == 400
    assert "chat already has a live rollout" in response.content.decode()
    assert Rollout.objects.count() == 1


def test_a_missing_route_or_candidate_is_a_form_error(
    client: Client, release_manager: User, db: None
) -> None:
    client.force_login(release_manager)
    response = client.post("/rollouts/new/", {"create": "1"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "Pick the route whose traffic the candidate will take." in body
    assert "Pick the candidate deployment to roll out." in body
