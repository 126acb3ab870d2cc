"""Route rules in the control plane: who may write them, what is refused, what is audited, and
what reaches the gateway's snapshot."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from django.db import connection

from core.errors import Conflict, DomainError, PermissionDenied
from core.models import AuditEvent
from evaluation.step_stats import arm_stats
from gateway.snapshot import SNAPSHOT_KEY, Snapshot
from rollouts.models import Deployment, Route, RouteRule
from rollouts.services.rollouts import rollout_control, rollout_create, rollout_start
from rollouts.services.rules import route_rule_create, route_rule_delete, route_rule_update
from tenants.models import Tenant, User
from tests.conftest import stored
from tests.factories import DeploymentFactory
from tests.registry.factories import register


@pytest.fixture
def long_context(route: Route) -> Deployment:
    return DeploymentFactory.create(
        artifact=register(family="long-chat", version="v1"),
        fleet=route.baseline.fleet,
        served_model_name="chat-long",
        max_model_len=32768,
        state="ready",
    )


def published(redis_client: redis.Redis, pending: list[Any]) -> Snapshot:
    assert redis_client.get(SNAPSHOT_KEY) is None  # nothing before the commit
    for callback in pending:
        callback()
    return Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or b"")


def test_a_rule_is_audited_and_published_after_commit(
    route: Route,
    long_context: Deployment,
    tenant_b: Tenant,
    release_manager: User,
    redis_client: redis.Redis,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as pending:
        rule = route_rule_create(
            actor=release_manager,
            route=route,
            name="long-ctx",
            target=long_context,
            tiers=["batch", "standard", "batch"],
            min_prompt_tokens=8001,
        )
    snapshot = published(redis_client, pending)
    (published_rule,) = snapshot.routes["chat"].rules
    assert published_rule.model_dump() == {
        "name": "long-ctx",
        "deployment_id": str(long_context.pk),
        "tenant_ids": frozenset(),
        "tiers": frozenset({"batch", "standard"}),
        "min_prompt_tokens": 8001,
        "max_prompt_tokens": None,
    }
    target = snapshot.deployments[str(long_context.pk)]
    assert (target.served_model_name, target.max_model_len) == ("chat-long", 32768)
    assert [r.id for r in target.replicas] == ["fleet/r0"]
    event = AuditEvent.objects.get(action="route_rule.created")
    assert (event.actor, event.target_id) == (release_manager, str(rule.pk))
    assert event.data["tiers"] == ["batch", "standard"]
    assert event.data["min_prompt_tokens"] == 8001


def test_rules_are_published_in_order_and_the_next_goes_last(
    route: Route,
    long_context: Deployment,
    tenant_a: Tenant,
    release_manager: User,
    redis_client: redis.Redis,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as pending:
        route_rule_create(
            actor=release_manager, route=route, name="b", target=long_context, tiers=["batch"]
        )
        route_rule_create(
            actor=release_manager, route=route, name="a", target=long_context, tenants=[tenant_a]
        )
        route_rule_create(
            actor=release_manager,
            route=route,
            name="first",
            target=long_context,
            max_prompt_tokens=10,
            order=0,
        )
    rules = published(redis_client, pending).routes["chat"].rules
    assert [r.name for r in rules] == ["first", "b", "a"]
    assert rules[2].tenant_ids == frozenset({str(tenant_a.pk)})
    assert list(RouteRule.objects.values_list("order", flat=True)) == [0, 1, 2]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "a rule must match on something"),
        (
            {"min_prompt_tokens": 9000, "max_prompt_tokens": 8000},
            "min_prompt_tokens (9000) is above max_prompt_tokens (8000)",
        ),
        ({"min_prompt_tokens": 40000}, "serves a context of 32768 tokens"),
        ({"tiers": ["gold"]}, "tiers:"),
        ({"tiers": ["batch"], "name": "Long Context"}, "name:"),
        ({"tiers": ["batch"], "name": "x" * 41}, "at most 40 characters"),
    ],
)
def test_bad_rules_are_refused_with_what_to_fix(
    route: Route,
    long_context: Deployment,
    release_manager: User,
    fields: dict[str, Any],
    message: str,
) -> None:
    name = fields.pop("name", "r")
    with pytest.raises(DomainError) as refused:
        route_rule_create(
            actor=release_manager, route=route, name=name, target=long_context, **fields
        )
    assert message in str(refused.value)
    assert not RouteRule.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="route_rule").exists()


@pytest.mark.parametrize("state", ["pending", "draining", "retired", "failed"])
def test_a_rule_must_target_a_ready_deployment(
    route: Route, long_context: Deployment, release_manager: User, state: str
) -> None:
    Deployment.objects.filter(pk=long_context.pk).update(state=state)
    long_context.refresh_from_db()
    with pytest.raises(DomainError, match=f"is {state}: a rule may only send traffic to a ready"):
        route_rule_create(
            actor=release_manager, route=route, name="r", target=long_context, tiers=["batch"]
        )


def test_a_rule_cannot_name_a_tenant_the_route_is_closed_to(
    route: Route,
    long_context: Deployment,
    tenant_a: Tenant,
    tenant_b: Tenant,
    release_manager: User,
) -> None:
    route.tenants.set([tenant_a])
    with pytest.raises(DomainError, match="route chat is closed to tenant-b"):
        route_rule_create(
            actor=release_manager,
            route=route,
            name="pin",
            target=long_context,
            tenants=[tenant_b],
        )


def test_names_and_orders_are_unique_per_route(
    route: Route, long_context: Deployment, release_manager: User
) -> None:
    route_rule_create(
        actor=release_manager, route=route, name="r", target=long_context, tiers=["batch"]
    )
    with pytest.raises(Conflict, match="already has a rule named 'r'"):
        route_rule_create(
            actor=release_manager, route=route, name="r", target=long_context, tiers=["batch"]
        )
    with pytest.raises(Conflict, match="already has a rule at order 1"):
        route_rule_create(
            actor=release_manager,
            route=route,
            name="s",
            target=long_context,
            tiers=["batch"],
            order=1,
        )


@pytest.mark.parametrize("actor", ["viewer", "tenant_a_admin", None])
def test_only_release_managers_change_rules(
    request: pytest.FixtureRequest,
    route: Route,
    long_context: Deployment,
    release_manager: User,
    actor: str | None,
) -> None:
    user = request.getfixturevalue(actor) if actor else None
    with pytest.raises(PermissionDenied):
        route_rule_create(actor=user, route=route, name="r", target=long_context, tiers=["batch"])
    rule = route_rule_create(
        actor=release_manager, route=route, name="r", target=long_context, tiers=["batch"]
    )
    with pytest.raises(PermissionDenied):
        route_rule_delete(actor=user, rule_id=rule.pk)
    with pytest.raises(PermissionDenied):
        route_rule_update(actor=user, rule_id=rule.pk, target=long_context, tiers=["standard"])
    assert RouteRule.objects.get().tiers == ["batch"]


def test_an_update_and_a_delete_are_audited_with_what_changed(
    route: Route,
    long_context: Deployment,
    tenant_a: Tenant,
    release_manager: User,
    redis_client: redis.Redis,
    django_capture_on_commit_callbacks: Any,
) -> None:
    rule = route_rule_create(
        actor=release_manager, route=route, name="r", target=long_context, tiers=["batch"]
    )
    with django_capture_on_commit_callbacks(execute=True):
        route_rule_update(
            actor=release_manager, rule_id=rule.pk, target=long_context, tenants=[tenant_a]
        )
    rules = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or b"").routes["chat"]
    assert [(r.tiers, r.tenant_ids) for r in rules.rules] == [
        (frozenset(), frozenset({str(tenant_a.pk)}))
    ]
    updated = AuditEvent.objects.get(action="route_rule.updated")
    assert updated.data["before"]["tiers"] == ["batch"]
    assert updated.data["after"]["tenants"] == ["tenant-a"]
    with django_capture_on_commit_callbacks(execute=True):
        route_rule_delete(actor=release_manager, rule_id=rule.pk, reason="tenant moved off")
    assert not RouteRule.objects.exists()
    deleted = AuditEvent.objects.get(action="route_rule.deleted")
    assert (deleted.reason, deleted.data["name"]) == ("tenant moved off", "r")
    snapshot = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or b"")
    assert snapshot.routes["chat"].rules == ()


def test_a_rule_whose_deployment_left_service_is_not_published(
    route: Route,
    long_context: Deployment,
    release_manager: User,
    redis_client: redis.Redis,
    django_capture_on_commit_callbacks: Any,
) -> None:
    route_rule_create(
        actor=release_manager, route=route, name="r", target=long_context, tiers=["batch"]
    )
    Deployment.objects.filter(pk=long_context.pk).update(state="draining")
    from orchestration.gateway_snapshot import publish_snapshot

    publish_snapshot()
    snapshot = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or b"")
    assert snapshot.routes["chat"].rules == ()
    assert str(long_context.pk) not in snapshot.deployments


def test_a_rule_pinning_a_tenant_to_the_old_baseline_keeps_it_there_after_promotion(
    route: Route,
    candidate: Deployment,
    tenant_a: Tenant,
    release_manager: User,
    redis_client: redis.Redis,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """A rule still sends traffic to the old baseline, so promotion neither drains nor retires
    it (rollouts.models.DeploymentQuerySet.in_use): the pinned tenant stays where a release
    manager put it until the rule goes."""
    baseline = route.baseline
    Deployment.objects.filter(pk=baseline.pk).update(state="ready")
    baseline.refresh_from_db()
    route_rule_create(
        actor=release_manager, route=route, name="pin", target=baseline, tenants=[tenant_a]
    )
    rollout = rollout_create(actor=None, route=route, candidate=candidate)
    with django_capture_on_commit_callbacks(execute=True):
        rollout_start(actor=None, rollout_id=rollout.pk)
    snapshot = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or b"")
    assert [r.name for r in snapshot.routes["chat"].rules] == ["pin"]
    with django_capture_on_commit_callbacks(execute=False) as pending:
        rollout_control(
            actor=release_manager, rollout_id=rollout.pk, action="promote", reason="looks good"
        )
    for callback in pending:
        if getattr(callback, "__name__", "") == "publish_snapshot":
            callback()
    snapshot = Snapshot.model_validate_json(redis_client.get(SNAPSHOT_KEY) or b"")
    assert [r.name for r in snapshot.routes["chat"].rules] == ["pin"]
    baseline.refresh_from_db()
    assert baseline.state == "ready"


def test_rule_samples_count_as_neither_arm_of_the_rollout(
    route: Route, candidate: Deployment, redis_client: redis.Redis
) -> None:
    rollout = rollout_start(
        actor=None,
        rollout_id=rollout_create(actor=None, route=route, candidate=candidate).pk,
    )
    since = rollout.step_started_at
    assert since is not None

    stored(rollout, "canary", 3, short=True)
    stored(rollout, "baseline", 4, short=True)
    stored(rollout, "rule:pin", 10, short=True, status=500)
    canary, baseline = (
        arm_stats(rollout.pk, "canary", since),
        arm_stats(rollout.pk, "baseline", since),
    )
    assert (canary.samples, canary.errors, baseline.samples, baseline.errors) == (3, 0, 4, 0)


@pytest.mark.django_db(transaction=True)
def test_two_rules_added_at_once_get_their_own_orders(
    route: Route, long_context: Deployment, release_manager: User, redis_client: redis.Redis
) -> None:
    """Both read "the last order is 0" without the route's row lock; with it, the second waits
    and goes after the first, instead of failing on the unique order."""
    barrier = threading.Barrier(2)
    errors: list[Exception] = []

    def add(name: str) -> None:
        try:
            barrier.wait()
            route_rule_create(
                actor=release_manager, route=route, name=name, target=long_context, tiers=["batch"]
            )
        except Exception as exc:  # noqa: BLE001 -- reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=add, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(RouteRule.objects.values_list("order", flat=True)) == [1, 2]
    assert AuditEvent.objects.filter(action="route_rule.created").count() == 2
