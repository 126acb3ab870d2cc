"""The registry's REST API as CI and release managers use it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_django import DjangoAssertNumQueries
from rest_framework.test import APIClient

from registry.models import EvalScore, ModelArtifact
from registry.services import alias_move
from tenants.choices import Scope
from tenants.models import User
from tenants.services.accounts import api_token_create
from tests.registry.factories import digest_of, register

RESULTS = Path(__file__).parent / "data" / "results_2026-11-30T12-00-00.json"
BASE = "/api/v1/registry"


def ci(client: APIClient, token: str) -> APIClient:
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def body(version: str = "v1", **extra: Any) -> dict[str, Any]:
    return {
        "family": "support-chat",
        "version": version,
        "uri": f"s3://models/support-chat/{version}",
        "digest": digest_of(version),
        "format": "safetensors",
        **extra,
    }


def test_ci_registers_an_artifact_and_a_retry_is_idempotent(
    api_client: APIClient, ci_token: str
) -> None:
    client = ci(api_client, ci_token)
    first = client.post(f"{BASE}/artifacts", body(), format="json")
    assert first.status_code == 201, first.json()
    again = client.post(f"{BASE}/artifacts", body(), format="json")
    assert again.status_code == 200
    assert again.json()["digest"] == first.json()["digest"]
    conflict = client.post(f"{BASE}/artifacts", body(digest=digest_of("other")), format="json")
    assert conflict.status_code == 409
    assert "already registered" in conflict.json()["detail"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"digest": "not-a-digest"}, "detail"),
        ({"format": "exe"}, "format"),
        ({"family": "Not A Slug!"}, "family"),
        ({"size_bytes": -1}, "size_bytes"),
    ],
)
def test_bad_registrations_are_400s_naming_the_field(
    api_client: APIClient, ci_token: str, change: dict[str, Any], field: str
) -> None:
    response = ci(api_client, ci_token).post(f"{BASE}/artifacts", body(**change), format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not ModelArtifact.objects.exists()


def test_lineage_is_added_and_read(api_client: APIClient, ci_token: str) -> None:
    register(version="base")
    register(version="ft")
    client = ci(api_client, ci_token)
    parents = {"parents": [{"family": "support-chat", "version": "base", "relation": "finetune"}]}
    added = client.post(f"{BASE}/artifacts/support-chat/ft/lineage", parents, format="json")
    assert added.status_code == 200, added.json()
    read = client.get(f"{BASE}/artifacts/support-chat/base/lineage").json()
    assert read["descendants"] == [
        {
            "child": "support-chat:ft",
            "parent": "support-chat:base",
            "relation": "finetune",
            "depth": 1,
        }
    ]
    cycle = {"parents": [{"family": "support-chat", "version": "ft", "relation": "merge"}]}
    refused = client.post(f"{BASE}/artifacts/support-chat/base/lineage", cycle, format="json")
    assert refused.status_code == 400
    assert "cycle" in refused.json()["detail"]
    unknown = {"parents": [{"family": "nope", "version": "v9", "relation": "merge"}]}
    missing = client.post(f"{BASE}/artifacts/support-chat/ft/lineage", unknown, format="json")
    assert missing.status_code == 400
    assert "unknown parent nope:v9" in missing.json()["detail"]


def test_lm_eval_results_upload_as_they_are_nan_included(
    api_client: APIClient, ci_token: str
) -> None:
    register()
    response = ci(api_client, ci_token).post(
        f"{BASE}/artifacts/support-chat/v1/evals",
        RESULTS.read_bytes(),
        content_type="application/json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["scores"] == 6
    comparison = api_client.get(f"{BASE}/artifacts/support-chat/v1/evals").json()
    bleu = next(s for s in comparison["scores"] if s["metric"] == "bleu_max")
    assert bleu["value"] is None
    assert bleu["raw"] == {"value": "nan", "stderr": "N/A"}


def test_malformed_eval_uploads_are_400s_and_write_nothing(
    api_client: APIClient, ci_token: str
) -> None:
    register()
    client = ci(api_client, ci_token)
    url = f"{BASE}/artifacts/support-chat/v1/evals"
    payload = json.loads(RESULTS.read_text(), parse_constant=lambda c: None)
    payload["results"]["gsm8k"]["exact_match,strict-match"] = "high"
    bad = client.post(url, payload, format="json")
    assert bad.status_code == 400
    assert "results.gsm8k.exact_match,strict-match" in bad.json()["detail"]
    no_results = client.post(url, {"configs": {}}, format="json")
    assert "results: missing" in no_results.json()["detail"]
    garbage = client.post(url, b"{not json", content_type="application/json")
    assert garbage.status_code == 400
    assert not EvalScore.objects.exists()


def test_an_oversized_upload_is_a_413(api_client: APIClient, ci_token: str, settings: Any) -> None:
    register()
    settings.EVAL_UPLOAD_MAX_BYTES = 1000
    response = ci(api_client, ci_token).post(
        f"{BASE}/artifacts/support-chat/v1/evals",
        RESULTS.read_bytes(),
        content_type="application/json",
    )
    assert response.status_code == 413


def test_aliases_move_with_a_reason_and_keep_history(api_client: APIClient, ci_token: str) -> None:
    register(version="v1")
    register(version="v2")
    client = ci(api_client, ci_token)
    url = f"{BASE}/families/support-chat/aliases/production"
    assert client.put(url, {"version": "v1", "reason": "GA"}, format="json").status_code == 200
    moved = client.put(url, {"version": "v2", "reason": "canary passed"}, format="json").json()
    assert moved["version"] == "v2"
    assert [(h["from_version"], h["to_version"]) for h in moved["history"]] == [
        ("v1", "v2"),
        (None, "v1"),
    ]
    assert client.put(url, {"version": "v1"}, format="json").status_code == 400
    assert client.put(url, {"version": "v9", "reason": "x"}, format="json").status_code == 404


def test_gates_are_set_checked_and_overridden(
    api_client: APIClient, ci_token: str, release_manager: User
) -> None:
    register(version="v1")
    client = ci(api_client, ci_token)
    client.post(
        f"{BASE}/artifacts/support-chat/v1/evals",
        [{"task": "arc", "metric": "acc", "value": 0.4}],
        format="json",
    )
    gates = {"gates": [{"task": "arc", "metric": "acc", "min_value": 0.5}]}
    assert (
        client.put(f"{BASE}/families/support-chat/gates", gates, format="json").status_code == 200
    )
    check = client.get(f"{BASE}/artifacts/support-chat/v1/gates").json()
    assert check["passed"] is False
    assert check["results"][0]["reason"] == "0.4 < minimum 0.5"
    override = client.post(
        f"{BASE}/artifacts/support-chat/v1/gates/override",
        {"reason": "eval set known to be broken"},
        format="json",
    )
    assert override.status_code == 201
    assert override.json()["overridden"] is True


def test_read_only_roles_and_tokens_cannot_write(
    api_client: APIClient, viewer: User, tenant_a_admin: User, ci_user: User
) -> None:
    register()
    for user in (viewer, tenant_a_admin):
        api_client.force_login(user)
        assert api_client.get(f"{BASE}/artifacts").status_code == 200
        assert api_client.post(f"{BASE}/artifacts", body("v2"), format="json").status_code == 403
    api_client.logout()
    _, read_only = api_token_create(
        actor=None, user=ci_user, name="ro", scopes=[Scope.REGISTRY_READ]
    )
    client = ci(api_client, read_only)
    assert client.get(f"{BASE}/artifacts/support-chat/v1").status_code == 200
    refused = client.post(f"{BASE}/artifacts", body("v2"), format="json")
    assert refused.status_code == 403
    assert "registry:write" in refused.json()["detail"]


def test_the_list_filters_and_paginates(api_client: APIClient, viewer: User) -> None:
    for i in range(3):
        register(version=f"v{i}")
    register(family="other", version="v1", format="gguf")
    api_client.force_login(viewer)
    page = api_client.get(f"{BASE}/artifacts", {"family": "support-chat"}).json()
    assert page["count"] == 3
    assert api_client.get(f"{BASE}/artifacts", {"format": "gguf"}).json()["count"] == 1
    assert api_client.get(f"{BASE}/artifacts", {"search": "v2"}).json()["count"] == 1


def test_unknown_artifacts_are_404s(api_client: APIClient, viewer: User) -> None:
    api_client.force_login(viewer)
    response = api_client.get(f"{BASE}/artifacts/support-chat/v404")
    assert response.status_code == 404
    assert response.json()["detail"] == "no artifact support-chat:v404 is registered"


@pytest.mark.parametrize("artifacts", [1, 30])
def test_the_list_and_detail_query_counts_are_pinned(
    api_client: APIClient,
    viewer: User,
    ci_user: User,
    django_assert_num_queries: DjangoAssertNumQueries,
    artifacts: int,
) -> None:
    for i in range(artifacts):
        artifact = register(version=f"v{i}")
        alias_move(
            actor=ci_user, family="support-chat", name=f"pin-{i}", artifact=artifact, reason="pin"
        )
    ModelArtifact.objects.update(created_by=ci_user)
    api_client.force_login(viewer)
    # session, user; count, page, aliases
    with django_assert_num_queries(5):
        assert api_client.get(f"{BASE}/artifacts").status_code == 200
    # session, user; the artifact with its creator, its aliases
    with django_assert_num_queries(4):
        assert api_client.get(f"{BASE}/artifacts/support-chat/v0").status_code == 200
