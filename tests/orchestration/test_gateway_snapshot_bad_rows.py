"""A row the snapshot schema refuses is left out, and every other change still reaches Redis.

The bad rows are written with queryset.update, past the validation that keeps the forms, the API
and the admin from saving them, as a script, a migration or an older release could.
"""

from __future__ import annotations

import redis
from django.test import Client

from gateway.snapshot import SNAPSHOT_KEY, Snapshot
from orchestration.gateway_snapshot import left_out_of_published, publish_snapshot
from rollouts.models import Deployment, Fleet, Replica
from rollouts.plans import Plan, Step
from rollouts.services.rollouts import rollout_control, rollout_create, rollout_start
from rollouts.services.rules import route_rule_create
from tenants.models import Budget, Tenant, User
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create, api_key_revoke
from tenants.tokens import hash_secret
from tests.factories import DeploymentFactory, RouteFactory
from tests.registry.factories import register


def published(client: redis.Redis) -> Snapshot:
    return Snapshot.model_validate_json(client.get(SNAPSHOT_KEY) or b"")


def deployment(version: str, **fields: object) -> Deployment:
    fleet, _ = Fleet.objects.get_or_create(name="gpu-a")
    Replica.objects.get_or_create(fleet=fleet, name="r0", base_url="http://10.0.0.1:8000")
    return DeploymentFactory.create(
        artifact=register(version=version),
        fleet=fleet,
        served_model_name=f"chat-{version}",
        **fields,
    )


def test_a_bad_budget_leaves_out_its_tenant_and_a_later_revocation_still_reaches_redis(
    tenant_a: Tenant, tenant_b: Tenant, redis_client: redis.Redis
) -> None:
    budget_set(actor=None, tenant=tenant_a, requests_per_minute=10)
    api_key_create(actor=None, tenant=tenant_a, name="prod")
    _, kept = api_key_create(actor=None, tenant=tenant_b, name="kept")
    leaked, leaked_secret = api_key_create(actor=None, tenant=tenant_b, name="leaked")
    publish_snapshot()
    assert hash_secret(leaked_secret) in published(redis_client).keys

    Budget.objects.filter(tenant=tenant_a).update(default_output_allowance=0)
    api_key_revoke(actor=None, key_id=leaked.pk)
    version = publish_snapshot()

    snapshot = published(redis_client)
    assert snapshot.version == version
    assert set(snapshot.tenants) == {str(tenant_b.pk)}
    assert set(snapshot.keys) == {hash_secret(kept)}  # tenant A's key went with its tenant
    [entry] = left_out_of_published()
    assert entry.row == "budget of tenant tenant-a"
    assert entry.error == "default_output_allowance: Input should be greater than or equal to 1"


def test_a_bad_baseline_leaves_out_its_route_and_the_other_routes_are_published(
    tenant_a: Tenant, redis_client: redis.Redis
) -> None:
    bad = deployment("v1")
    good = deployment("v2")
    RouteFactory.create(name="chat", baseline=bad)
    RouteFactory.create(name="summaries", baseline=good)
    Deployment.objects.filter(pk=bad.pk).update(max_model_len=0)

    publish_snapshot()

    snapshot = published(redis_client)
    assert set(snapshot.routes) == {"summaries"}
    assert set(snapshot.deployments) == {str(good.pk)}
    assert set(snapshot.tenants) == {str(tenant_a.pk)}
    rows = {entry.row: entry for entry in left_out_of_published()}
    assert set(rows) == {f"deployment {bad.pk} (chat-v1 on gpu-a)", "route chat"}
    assert "max_model_len" in rows[f"deployment {bad.pk} (chat-v1 on gpu-a)"].error


def test_a_bad_canary_drops_its_arm_and_the_baseline_serves_the_whole_route(
    db: None, redis_client: redis.Redis
) -> None:
    baseline = deployment("v1")
    canary = deployment("v2", state="ready")
    RouteFactory.create(name="chat", baseline=baseline, canary=canary, canary_weight=25)
    Deployment.objects.filter(pk=canary.pk).update(max_in_flight_per_replica=0)

    publish_snapshot()

    chat = published(redis_client).routes["chat"]
    assert [(arm.name, arm.weight) for arm in chat.arms] == [("baseline", 100.0)]
    rows = [entry.row for entry in left_out_of_published()]
    assert rows == [f"deployment {canary.pk} (chat-v2 on gpu-a)", "canary arm of route chat"]


def test_a_rule_whose_target_is_bad_is_left_out_and_its_route_published(
    release_manager: User, redis_client: redis.Redis
) -> None:
    route = RouteFactory.create(name="chat", baseline=deployment("v1"))
    target = deployment("v2", state="ready")
    route_rule_create(
        actor=release_manager, route=route, name="long", target=target, tiers=["batch"]
    )
    Deployment.objects.filter(pk=target.pk).update(max_model_len=0)

    publish_snapshot()

    assert published(redis_client).routes["chat"].rules == ()
    assert "rule long of route chat" in [entry.row for entry in left_out_of_published()]


def test_a_rollback_reaches_redis_while_a_bad_row_is_left_out(
    tenant_a: Tenant, redis_client: redis.Redis
) -> None:
    route = RouteFactory.create(name="chat", baseline=deployment("v1"))
    rollout = rollout_create(
        actor=None,
        route=route,
        candidate=deployment("v2", state="ready"),
        plan=Plan(steps=(Step(weight=50), Step(weight=100))),
    )
    rollout_start(actor=None, rollout_id=rollout.pk)
    publish_snapshot()
    assert len(published(redis_client).routes["chat"].arms) == 2

    budget_set(actor=None, tenant=tenant_a, requests_per_minute=10)
    Budget.objects.filter(tenant=tenant_a).update(default_output_allowance=0)
    manager = User.objects.create(username="on-call", role="release_manager")
    rollout_control(actor=manager, rollout_id=rollout.pk, action="rollback", reason="errors")
    publish_snapshot()

    assert [arm.name for arm in published(redis_client).routes["chat"].arms] == ["baseline"]


def test_release_managers_see_the_rows_left_out_on_the_home_page_and_readyz_counts_them(
    client: Client, tenant_a: Tenant, release_manager: User, viewer: User, redis_client: redis.Redis
) -> None:
    budget_set(actor=None, tenant=tenant_a, requests_per_minute=10)
    Budget.objects.filter(tenant=tenant_a).update(default_output_allowance=0)
    publish_snapshot()

    assert client.get("/readyz").json()["gateway_snapshot"] == {
        "status": "error",
        "rows_left_out": 1,
    }
    client.force_login(release_manager)
    page = client.get("/", headers={"HX-Request": "true"}).content.decode()
    assert 'data-left-out="budget of tenant tenant-a"' in page
    assert "keys are refused until the row is corrected" in page
    client.force_login(viewer)
    assert "tenant-a" not in client.get("/").content.decode()
