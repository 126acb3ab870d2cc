"""POST /api/v1/feedback: applications rate responses with their gateway key."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from evaluation.choices import FeedbackValue
from evaluation.models import Feedback
from evaluation.services import feedback_record
from rollouts.models import Rollout
from tenants.models import Tenant, User
from tenants.services.gateway_keys import api_key_create
from tests.conftest import stored


@pytest.fixture
def key_a(tenant_a: Tenant) -> str:
    _, secret = api_key_create(actor=None, tenant=tenant_a, name="app")
    return secret


def post(client: APIClient, secret: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    response = client.post("/api/v1/feedback", body, format="json")
    return response.status_code, response.json()


def test_it_stores_thumbs_against_the_samples_arm(
    api_client: APIClient, key_a: str, running: Rollout
) -> None:
    sample = stored(running, "canary", 1)[0]
    status, body = post(api_client, key_a, {"id": sample.rid, "thumbs": "down"})
    assert status == 201, body
    assert (body["arm"], body["rollout"], body["step"], body["value"]) == (
        "canary",
        running.pk,
        0,
        "down",
    )
    assert Feedback.objects.get(sample=sample).value == "down"


def test_a_second_report_replaces_the_first(
    api_client: APIClient, key_a: str, running: Rollout
) -> None:
    sample = stored(running, "baseline", 1)[0]
    post(api_client, key_a, {"id": sample.rid, "thumbs": "down"})
    status, _ = post(api_client, key_a, {"id": sample.rid, "outcome": "success", "note": "fixed"})
    assert status == 201
    feedback = Feedback.objects.get()
    assert (feedback.value, feedback.note) == ("success", "fixed")


def test_an_unseen_id_is_a_404_that_says_to_retry(api_client: APIClient, key_a: str) -> None:
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {key_a}")
    response = api_client.post("/api/v1/feedback", {"id": "chatcmpl-nope", "thumbs": "up"})
    assert response.status_code == 404
    assert "not been seen yet" in response.json()["detail"]
    assert response.headers["Retry-After"] == "5"


def test_another_tenants_response_looks_unknown(
    api_client: APIClient, tenant_b: Tenant, running: Rollout
) -> None:
    _, key_b = api_key_create(actor=None, tenant=tenant_b, name="app")
    sample = stored(running, "canary", 1, tenant="tenant-a")[0]
    status, _ = post(api_client, key_b, {"id": sample.rid, "thumbs": "up"})
    assert status == 404
    assert not Feedback.objects.exists()


def test_a_key_limited_to_other_routes_cannot_rate_this_one(
    api_client: APIClient, tenant_a: Tenant, running: Rollout
) -> None:
    _, narrow = api_key_create(actor=None, tenant=tenant_a, name="narrow", allowed_routes=["code"])
    sample = stored(running, "canary", 1, route="chat")[0]
    status, _ = post(api_client, narrow, {"id": sample.rid, "thumbs": "up"})
    assert status == 404


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"id": "x"}, "give exactly one of `thumbs`"),
        ({"id": "x", "thumbs": "up", "outcome": "success"}, "give exactly one of `thumbs`"),
        ({"id": "x", "thumbs": "sideways"}, '"sideways" is not a valid choice.'),
        ({"thumbs": "up"}, "This field is required."),
        ({"id": "x" * 101, "thumbs": "up"}, "no more than 100 characters"),
    ],
)
def test_bad_feedback_is_a_clear_400(
    api_client: APIClient, key_a: str, body: dict[str, object], message: str
) -> None:
    status, answer = post(api_client, key_a, body)
    assert status == 400
    assert message in str(answer)


def test_a_revoked_or_made_up_key_is_refused(api_client: APIClient, db: None) -> None:
    status, body = post(api_client, "tk_made-up", {"id": "x", "thumbs": "up"})
    assert status == 401
    assert "gateway key" in str(body["detail"])


def test_a_release_managers_token_may_rate_any_response_but_a_viewers_may_not(
    api_client: APIClient, ci_token: str, viewer: User, running: Rollout
) -> None:
    sample = stored(running, "canary", 1, tenant="tenant-z")[0]
    status, _ = post(api_client, ci_token, {"id": sample.rid, "thumbs": "up"})
    assert status == 201
    api_client.credentials()
    api_client.force_login(viewer)
    response = api_client.post("/api/v1/feedback", {"id": sample.rid, "thumbs": "up"})
    assert response.status_code in (401, 403)


def test_feedback_is_in_the_openapi_schema(api_client: APIClient, viewer: User) -> None:
    api_client.force_login(viewer)
    schema = api_client.get(
        "/api/schema/", {"format": "json"}, HTTP_ACCEPT="application/json"
    ).json()
    operation = schema["paths"]["/api/v1/feedback"]["post"]
    assert operation["operationId"] == "feedback_create"
    assert "404" in operation["responses"]


@pytest.mark.django_db(transaction=True)
def test_two_reports_on_one_response_at_once_leave_one_row(
    tenant_a: Tenant,
) -> None:
    sample = stored(None, "canary", 1)[0]
    key, _ = api_key_create(actor=None, tenant=tenant_a, name="app")
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def report(value: FeedbackValue) -> None:
        try:
            barrier.wait(timeout=5)
            feedback_record(rid=sample.rid, value=value, key=key)
        except BaseException as exc:  # noqa: BLE001 -- collected and asserted below
            errors.append(exc)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=report, args=(value,))
        for value in (FeedbackValue.UP, FeedbackValue.DOWN)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Feedback.objects.filter(sample=sample).count() == 1
