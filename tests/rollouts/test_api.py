"""The rollouts API as CI uses it."""

from __future__ import annotations

import redis
from rest_framework.test import APIClient

from rollouts.models import Deployment, Route
from tenants.models import User
from tests.factories import DeploymentFactory


def test_ci_creates_starts_watches_and_rolls_back_a_rollout(
    api_client: APIClient,
    ci_token: str,
    route: Route,
    candidate: Deployment,
    redis_client: redis.Redis,
) -> None:
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {ci_token}")
    created = api_client.post(
        "/api/v1/rollouts",
        {
            "route": "chat",
            "candidate_deployment": candidate.pk,
            "steps": [{"weight": 10, "min_bake_s": 60}, {"weight": 100}],
            "gates": {"ttft_p95_ms": 800, "max_error_rate": 0.02},
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["state"], body["canary_weight"], body["candidate"]) == (
        "running",
        10.0,
        "support-chat:v2",
    )
    rollout_id = body["id"]
    watched = api_client.get(f"/api/v1/rollouts/{rollout_id}").json()
    assert [e["to_state"] for e in watched["events"]] == ["preflight", "running"]
    live = api_client.get("/api/v1/rollouts", {"state": "live"}).json()
    assert [r["id"] for r in live["results"]] == [rollout_id]
    rolled = api_client.post(
        f"/api/v1/rollouts/{rollout_id}/actions",
        {"action": "rollback", "reason": "latency complaints"},
        format="json",
    )
    assert rolled.status_code == 200
    assert rolled.json()["state"] == "rolled_back"
    assert rolled.json()["canary_weight"] == 0.0


def test_bad_rollout_requests_are_clear_400s(
    api_client: APIClient, release_manager: User, route: Route, candidate: Deployment
) -> None:
    api_client.force_login(release_manager)
    cases = [
        ({"route": "nope", "candidate_deployment": candidate.pk}, "no route named 'nope'"),
        ({"route": "chat", "candidate_deployment": 999999}, "no deployment 999999"),
        (
            {"route": "chat", "candidate_deployment": candidate.pk, "steps": [{"weight": 50}]},
            "the last step must send 100%",
        ),
        (
            {"route": "chat", "candidate_deployment": route.baseline_id},
            "already is the baseline",
        ),
        (
            {"route": "chat", "candidate_deployment": candidate.pk, "control_deployment": 999999},
            "no deployment 999999",
        ),
        (
            {
                "route": "chat",
                "candidate_deployment": candidate.pk,
                "control_deployment": route.baseline_id,
            },
            "the control must be a deployment of its own",
        ),
    ]
    for payload, message in cases:
        response = api_client.post("/api/v1/rollouts", payload, format="json")
        assert response.status_code == 400, payload
        assert message in str(response.json()), response.json()


def test_viewers_watch_but_cannot_steer(
    api_client: APIClient, viewer: User, route: Route, candidate: Deployment
) -> None:
    api_client.force_login(viewer)
    assert api_client.get("/api/v1/rollouts").status_code == 200
    payload = {"route": "chat", "candidate_deployment": candidate.pk}
    assert api_client.post("/api/v1/rollouts", payload, format="json").status_code == 403


def test_ci_names_a_control_deployment(
    api_client: APIClient,
    ci_token: str,
    route: Route,
    candidate: Deployment,
    redis_client: redis.Redis,
) -> None:
    control = DeploymentFactory.create(
        artifact=route.baseline.artifact,
        fleet=route.baseline.fleet,
        served_model_name="chat-v1-control",
        state="ready",
    )
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {ci_token}")
    payload = {
        "route": "chat",
        "candidate_deployment": candidate.pk,
        "control_deployment": control.pk,
    }
    created = api_client.post("/api/v1/rollouts", payload, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["control"] == "support-chat:v1"
    route.refresh_from_db()
    assert (route.canary, route.control) == (candidate, control)
