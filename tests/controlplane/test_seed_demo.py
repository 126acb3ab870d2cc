import importlib.util
import io
import json
import sys
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from core.models import AuditEvent
from rollouts.models import PlanTemplate, Rollout
from rollouts.seed import FLEETS, REPLICAS_PER_FLEET
from tenants.models import ApiToken, Tenant, User
from tests.conftest import ROOT


def seed_json() -> dict[str, Any]:
    out = io.StringIO()
    call_command("seed_demo", "--json", stdout=out)
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def counts() -> tuple[int, int, int, int, int]:
    return (
        Tenant.objects.count(),
        User.objects.count(),
        ApiToken.objects.count(),
        AuditEvent.objects.count(),
        PlanTemplate.objects.count(),
    )


def test_seeding_twice_changes_nothing_the_second_time(db: None) -> None:
    first = seed_json()
    after_first = counts()
    second = seed_json()
    assert counts() == after_first
    assert first == second
    # The demo canary's plan is a saved template people can reuse from the create form.
    assert set(PlanTemplate.objects.values_list("name", flat=True)) == {"standard", "demo"}


def test_the_printed_logins_work(db: None, client: Any) -> None:
    result = seed_json()
    roles = {login["role"] for login in result["logins"]}
    assert roles == {"release_manager", "tenant_admin", "viewer"}
    for login in result["logins"]:
        assert client.login(username=login["username"], password=login["password"])


def test_the_printed_ci_token_authenticates(db: None) -> None:
    token = seed_json()["ci_token"]["token"]
    response = APIClient().get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    assert "rollouts:write" in response.json()["scopes"]


def test_seeding_restores_a_demo_user_that_was_changed(db: None, client: Any) -> None:
    seed_json()
    user = User.objects.get(username="release")
    user.set_password("something-else")
    user.is_active = False
    user.save()
    seed_json()
    assert client.login(username="release", password="tollgate-demo")


def test_the_json_names_every_url_people_need(db: None) -> None:
    urls = seed_json()["urls"]
    assert {"web", "admin", "api_docs", "readyz", "gateway", "prometheus"} <= urls.keys()


def test_the_demo_canary_compares_v2_with_a_copy_of_v1_on_replicas_of_its_own(db: None) -> None:
    seed_json()
    call_command("demo_canary", stdout=io.StringIO())
    rollout = Rollout.objects.get()
    assert (rollout.candidate.artifact.version, rollout.candidate.fleet.name) == (
        "v2",
        "simfleet-b",
    )
    assert rollout.control is not None
    assert rollout.control.artifact == rollout.route.baseline.artifact
    assert rollout.control.fleet.name == "simfleet-c"
    # Each arm on replicas of its own, three each, every one on its own port.
    arms = [rollout.route.baseline, rollout.candidate, rollout.control]
    replicas = [set(arm.fleet.replicas.values_list("base_url", flat=True)) for arm in arms]
    assert [len(urls) for urls in replicas] == [3, 3, 3]
    assert len(set().union(*replicas)) == 9
    # Run again while it is live, it starts nothing more.
    call_command("demo_canary", stdout=io.StringIO())
    assert Rollout.objects.count() == 1


def test_make_up_starts_a_simfleet_replica_for_every_replica_the_seed_names() -> None:
    # deploy/stack.py runs without Django, so it states the count itself: the two must agree.
    spec = importlib.util.spec_from_file_location("stack", ROOT / "deploy" / "stack.py")
    assert spec is not None
    assert spec.loader is not None
    stack = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "stack", stack)  # its dataclasses look their module up
        spec.loader.exec_module(stack)
        patch.delenv("SIMFLEET_REPLICAS", raising=False)
        patch.delenv("SIMFLEET_BASE_PORT", raising=False)
        ports = stack.simfleet_ports()
    assert ports == [9101 + i for i in range(len(FLEETS) * REPLICAS_PER_FLEET)]
