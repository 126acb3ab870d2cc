"""The A/B report as a page and as JSON, and the verdict endpoint for Argo Rollouts and Flagger."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from evaluation.models import Feedback, RequestSample, Verdict
from orchestration.engine import advance
from rollouts.models import Rollout
from tenants.models import Tenant, User
from tests.evaluation.test_judging import baked, traffic

UNREACHABLE = "http://127.0.0.1:9"


@pytest.fixture
def judged(running: Rollout, settings: Settings) -> Rollout:
    """A rollout whose first step the judge passed on 3,000 requests per arm."""
    settings.PROMETHEUS_URL = UNREACHABLE
    traffic(running, "baseline", 3000, seed=21)
    traffic(running, "canary", 3000, seed=22)
    baked(running)
    advance(running.pk)
    running.refresh_from_db()
    return running


def api_get(client: APIClient, token: str, url: str) -> Any:
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.get(url)


def test_the_report_json_has_both_arms_the_verdicts_and_the_cost(
    api_client: APIClient, ci_token: str, judged: Rollout
) -> None:
    response = api_get(api_client, ci_token, f"/api/v1/rollouts/{judged.pk}/report?step=1")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["step"] == 0
    assert body["decision"]["decision"] == "promote"
    assert body["decision"]["final"] is True
    assert body["arms"]["baseline"]["samples"] == body["arms"]["canary"]["samples"] == 3000
    ttft = body["arms"]["canary"]["ttft_ms"]
    assert 0 < ttft["p50"] < ttft["p95"] < ttft["p99"]
    assert body["arms"]["canary"]["cost_per_million_output_tokens"] == pytest.approx(2.0)
    verdicts = {v["metric"]: v for v in body["verdicts"]}
    assert verdicts["ttft_p95"]["outcome"] == "pass"
    assert {"n_baseline", "difference", "interval", "threshold", "rule"} <= set(
        verdicts["ttft_p95"]
    )
    assert body["fleet_signals"]["canary"] == {"available": False, "latest": None}
    assert body["cost"]["canary"]["source"] == "unknown"


def test_feedback_is_counted_per_arm_in_the_report(
    api_client: APIClient, ci_token: str, judged: Rollout
) -> None:
    canary = judged.pk
    samples = list(RequestSample.objects.filter(rollout_id=canary, arm="canary").order_by("id")[:3])
    Feedback.objects.create(sample=samples[0], value="up")
    Feedback.objects.create(sample=samples[1], value="failure")
    Feedback.objects.create(sample=samples[2], value="success")
    body = api_get(api_client, ci_token, f"/api/v1/rollouts/{canary}/report?step=1").json()
    assert body["arms"]["canary"]["feedback"] == {"positive": 2, "negative": 1}
    assert body["arms"]["baseline"]["feedback"] == {"positive": 0, "negative": 0}


@pytest.mark.parametrize("step", ["0", "3", "x"])
def test_a_step_outside_the_plan_is_a_clear_400(
    api_client: APIClient, ci_token: str, running: Rollout, step: str
) -> None:
    response = api_get(api_client, ci_token, f"/api/v1/rollouts/{running.pk}/report?step={step}")
    assert response.status_code == 400
    assert "step must be a number from 1 to 2" in response.json()["detail"]


def test_the_verdict_endpoint_speaks_argo_and_flagger(
    api_client: APIClient, ci_token: str, judged: Rollout
) -> None:
    url = f"/api/v1/rollouts/{judged.pk}/verdict"
    argo = api_get(api_client, ci_token, url).json()
    assert (argo["decision"], argo["value"], argo["step"]) == ("promote", 1, 1)
    assert api_get(api_client, ci_token, f"{url}?format=flagger").status_code == 200
    Verdict.objects.filter(rollout=judged).update(decision="hold")
    held = api_get(api_client, ci_token, f"{url}?format=flagger")
    assert (held.status_code, held.json()["value"]) == (409, 0)
    Rollout.objects.filter(pk=judged.pk).update(state="rolled_back")
    rolled = api_get(api_client, ci_token, f"{url}?format=flagger")
    assert (rolled.status_code, rolled.json()["decision"], rolled.json()["value"]) == (
        412,
        "rollback",
        -1,
    )
    bad = api_get(api_client, ci_token, f"{url}?format=spinnaker")
    assert bad.status_code == 400


def test_a_rollout_not_yet_judged_is_pending(
    api_client: APIClient, ci_token: str, running: Rollout
) -> None:
    body = api_get(api_client, ci_token, f"/api/v1/rollouts/{running.pk}/verdict").json()
    assert (body["decision"], body["value"], body["looked_at"]) == ("pending", 0, None)


def test_a_tenant_admin_cannot_see_the_report_of_a_route_restricted_to_another_tenant(
    client: Client, running: Rollout, tenant_a_admin: User, tenant_b: Tenant
) -> None:
    running.route.tenants.add(tenant_b)
    client.force_login(tenant_a_admin)
    assert client.get(f"/rollouts/{running.pk}/report/").status_code == 404
    assert client.get(f"/api/v1/rollouts/{running.pk}/verdict").status_code == 404
    assert client.get(f"/api/v1/rollouts/{running.pk}/report").status_code == 404


def test_the_report_page_shows_the_table_with_badges_charts_and_unavailable_signals(
    client: Client,
    judged: Rollout,
    viewer: User,
    django_assert_max_num_queries: Callable[..., Any],
) -> None:
    client.force_login(viewer)
    with django_assert_max_num_queries(QUERIES):
        page = client.get(f"/rollouts/{judged.pk}/report/?step=1").content.decode()
    assert 'data-metric="ttft_p95"' in page
    assert '<span class="verdict verdict-pass"' in page
    assert page.count('<svg class="ab-chart"') == 6
    assert page.count('class="series series-canary"') == 4  # two CDFs, two time series
    assert 'data-testid="unavailable"' in page
    assert "Promote" in page


def test_the_fleet_table_has_a_cell_for_each_arm_it_names(
    client: Client, judged: Rollout, viewer: User
) -> None:
    # Without a control arm: two columns, and no third cell left "unavailable" beside them.
    client.force_login(viewer)
    page = client.get(f"/rollouts/{judged.pk}/report/?step=1").content.decode()
    table = page[page.index('data-testid="fleet"') :].split("</table>")[0]
    header = table.split("</thead>")[0]
    assert header.count("<th>") == 3, header  # the label's column and two arms
    for row in table.split("<tbody>")[1].split("</tr>")[:-1]:
        assert row.count("<td") == 3, row


def test_the_page_names_a_replica_the_judge_set_aside(
    client: Client, judged: Rollout, viewer: User
) -> None:
    verdict = Verdict.objects.filter(rollout=judged).latest("looked_at")
    line = "candidate replica r2: median TTFT +25% against its 3 siblings"
    verdict.report = {**verdict.report, "set_aside": [line]}
    verdict.save(update_fields=["report"])
    client.force_login(viewer)
    page = client.get(f"/rollouts/{judged.pk}/report/?step=1").content.decode()
    assert f'<p class="notice" data-testid="set-aside">Set aside: {line}</p>' in page


def test_the_page_polls_while_live_and_stops_when_the_rollout_ends(
    client: Client, judged: Rollout, viewer: User
) -> None:
    client.force_login(viewer)
    live = client.get(f"/rollouts/{judged.pk}/report/", HTTP_HX_REQUEST="true")
    assert live.status_code == 200
    assert 'hx-trigger="every 5s"' in live.content.decode()
    Rollout.objects.filter(pk=judged.pk).update(state="promoted")
    ended = client.get(f"/rollouts/{judged.pk}/report/", HTTP_HX_REQUEST="true")
    assert ended.status_code == 286


def test_the_query_count_does_not_grow_with_the_samples(
    client: Client, judged: Rollout, viewer: User, django_assert_num_queries: Callable[..., Any]
) -> None:
    client.force_login(viewer)
    url = f"/rollouts/{judged.pk}/report/?step=1"
    client.get(url)
    traffic(judged, "canary", 500, seed=23, step=0)
    with django_assert_num_queries(QUERIES):
        client.get(url)


# session, user, rollout, two fleets' replicas, arm table, feedback, verdicts, histogram, series
QUERIES = 10


def test_a_report_of_an_empty_step_renders(client: Client, running: Rollout, viewer: User) -> None:
    client.force_login(viewer)
    Rollout.objects.filter(pk=running.pk).update(step_started_at=timezone.now() - dt.timedelta(0))
    response = client.get(f"/rollouts/{running.pk}/report/?step=2")
    assert response.status_code == 200
    assert "the judge does not compare arms at this step" in response.content.decode()


def test_flagger_posts_with_the_token_in_its_metadata(
    api_client: APIClient, ci_token: str, judged: Rollout
) -> None:
    payload = {
        "name": "chat",
        "namespace": "prod",
        "phase": "Progressing",
        "metadata": {"token": ci_token},
    }
    url = f"/api/v1/rollouts/{judged.pk}/verdict"
    assert api_client.post(url, payload, format="json").status_code == 200
    Rollout.objects.filter(pk=judged.pk).update(state="aborted")
    assert api_client.post(url, payload, format="json").status_code == 412
    payload["metadata"] = {"token": "tg_not-a-token"}
    assert api_client.post(url, payload, format="json").status_code == 401
    assert api_client.post(url, {"metadata": {}}, format="json").status_code == 401
