"""`Idempotency-Key` on the API's writes: a retry gets the first answer, nothing runs twice."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from core.idempotency import TTL, prune
from core.models import AuditEvent, IdempotencyRecord
from registry.models import EvalScore
from rollouts.models import Deployment, Fleet, Rollout, Route
from rollouts.services import rollouts as rollout_services
from tenants.choices import Scope
from tenants.models import ApiToken, User
from tenants.services.accounts import api_token_create
from tests.registry.factories import register

RESULTS = Path(__file__).parent.parent / "registry" / "data" / "results_2026-11-30T12-00-00.json"


def rollout_body(candidate: Deployment) -> dict[str, Any]:
    return {
        "route": "chat",
        "candidate_deployment": candidate.pk,
        "steps": [{"weight": 10, "min_bake_s": 60}, {"weight": 100}],
    }


def with_key(client: APIClient, token: str, key: str) -> APIClient:
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_IDEMPOTENCY_KEY=key)
    return client


def test_a_retried_rollout_start_starts_one_rollout_and_answers_the_same(
    api_client: APIClient, ci_token: str, route: Route, candidate: Deployment
) -> None:
    client = with_key(api_client, ci_token, "start-v2-0001")
    first = client.post("/api/v1/rollouts", rollout_body(candidate), format="json")
    again = client.post("/api/v1/rollouts", rollout_body(candidate), format="json")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Rollout.objects.count() == 1
    # Another operation needs another key: this one, with another body, is refused.
    other = client.post(
        "/api/v1/rollouts", {**rollout_body(candidate), "steps": [{"weight": 100}]}, format="json"
    )
    assert other.status_code == 422
    assert "first used for another request" in other.json()["detail"]
    assert Rollout.objects.count() == 1


def test_a_retried_eval_upload_writes_its_scores_once(api_client: APIClient, ci_token: str) -> None:
    register()
    client = with_key(api_client, ci_token, "evals-v1")
    url = "/api/v1/registry/artifacts/support-chat/v1/evals"
    answers = [
        client.post(url, RESULTS.read_bytes(), content_type="application/json") for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [201, 201, 201]
    assert EvalScore.objects.count() == answers[0].json()["scores"] == 6


def test_keys_belong_to_their_caller(
    api_client: APIClient, ci_token: str, release_manager: User, route: Route, candidate: Deployment
) -> None:
    with_key(api_client, ci_token, "shared-name").post(
        "/api/v1/rollouts", rollout_body(candidate), format="json"
    )
    Rollout.objects.update(state="aborted")
    other = Client(headers={"Idempotency-Key": "shared-name"})
    other.force_login(release_manager)
    second = other.post(
        "/api/v1/rollouts", rollout_body(candidate), content_type="application/json"
    )
    assert second.status_code == 201
    assert "Idempotent-Replayed" not in second
    assert Rollout.objects.count() == 2


def test_an_answer_with_a_secret_is_not_kept(api_client: APIClient, release_manager: User) -> None:
    api_client.force_login(release_manager)
    api_client.credentials(HTTP_IDEMPOTENCY_KEY="token-1")
    body = {"name": "pipeline", "scopes": ["rollouts:read"]}
    first = api_client.post("/api/v1/tokens", body, format="json")
    assert first.status_code == 201
    again = api_client.post("/api/v1/tokens", body, format="json")
    assert again.status_code == 409
    assert "succeeded (201)" in again.json()["detail"]
    assert ApiToken.objects.filter(user=release_manager).count() == 1
    stored = IdempotencyRecord.objects.get(key="token-1")
    assert first.json()["secret"].encode() not in bytes(stored.body)


def test_a_failed_request_is_not_kept_and_its_retry_runs(
    ci_token: str, route: Route, candidate: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(**kwargs: Any) -> Any:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(rollout_services, "rollout_start", broken)
    client = Client(
        raise_request_exception=False,
        headers={"Authorization": f"Bearer {ci_token}", "Idempotency-Key": "flaky"},
    )
    body = rollout_body(candidate)
    failed = client.post("/api/v1/rollouts", body, content_type="application/json")
    assert failed.status_code == 500
    assert not IdempotencyRecord.objects.exists()
    assert Rollout.objects.count() == 0  # the failed attempt's writes rolled back with it
    monkeypatch.undo()
    retried = client.post("/api/v1/rollouts", body, content_type="application/json")
    assert retried.status_code == 201
    assert Rollout.objects.count() == 1


def test_bad_keys_are_400s_and_reads_ignore_keys(
    api_client: APIClient, ci_token: str, route: Route, candidate: Deployment
) -> None:
    for key in ("x" * 256, "caf\u00e9"):
        client = Client(headers={"Authorization": f"Bearer {ci_token}", "Idempotency-Key": key})
        response = client.post(
            "/api/v1/rollouts", rollout_body(candidate), content_type="application/json"
        )
        assert response.status_code == 400
        assert "printable ASCII" in response.json()["detail"]
    assert Rollout.objects.count() == 0
    reader = with_key(api_client, ci_token, "read")
    assert reader.get("/api/v1/rollouts").status_code == 200
    assert not IdempotencyRecord.objects.exists()


def test_keys_are_kept_a_day(
    api_client: APIClient, ci_token: str, route: Route, candidate: Deployment
) -> None:
    client = with_key(api_client, ci_token, "old")
    client.post("/api/v1/rollouts", rollout_body(candidate), format="json")
    Rollout.objects.update(state="aborted")
    IdempotencyRecord.objects.update(created_at=timezone.now() - TTL - dt.timedelta(minutes=1))
    # Past its day the key is new again (and the beat prunes what is left).
    assert (
        client.post("/api/v1/rollouts", rollout_body(candidate), format="json").status_code == 201
    )
    assert Rollout.objects.count() == 2
    IdempotencyRecord.objects.update(created_at=timezone.now() - TTL - dt.timedelta(minutes=1))
    assert prune() == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_retries_start_one_rollout(
    ci_user: User, route: Route, candidate: Deployment
) -> None:
    _, token = api_token_create(
        actor=None, user=ci_user, name="race", scopes=[Scope.ROLLOUTS_WRITE, Scope.ROLLOUTS_READ]
    )
    barrier = threading.Barrier(2)
    answers: list[tuple[int, bytes]] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            client = Client(
                headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "race-1"}
            )
            barrier.wait()
            response = client.post(
                "/api/v1/rollouts", rollout_body(candidate), content_type="application/json"
            )
            answers.append((response.status_code, response.content))
        except BaseException as exc:  # noqa: BLE001 -- surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [status for status, _ in answers] == [201, 201]
    assert answers[0][1] == answers[1][1]
    assert Rollout.objects.count() == 1
    assert ApiToken.objects.filter(name="race").exists()


def test_a_retried_deployment_create_makes_one_deployment(
    api_client: APIClient, ci_user: User
) -> None:
    _, token = api_token_create(
        actor=None, user=ci_user, name="deployer", scopes=[Scope.ROLLOUTS_WRITE]
    )
    Fleet.objects.create(name="gpu-a")
    register(version="v1")
    client = with_key(api_client, token, "deploy-v1")
    body = {"artifact": "support-chat:v1", "fleet": "gpu-a", "served_model_name": "chat"}
    first = client.post("/api/v1/deployments", body, format="json")
    again = client.post("/api/v1/deployments", body, format="json")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Deployment.objects.count() == 1
    assert AuditEvent.objects.filter(action="deployment.created").count() == 1


def test_a_refused_caller_is_not_kept(route: Route, candidate: Deployment) -> None:
    client = Client(headers={"Authorization": "Bearer tg_not-a-token", "Idempotency-Key": "k1"})
    answer = client.post(
        "/api/v1/rollouts", rollout_body(candidate), content_type="application/json"
    )
    assert answer.status_code == 401
    assert not IdempotencyRecord.objects.exists()
