"""Route rules: requests matched by tenant, tier or prompt size go to the rule's deployment, under
the arm "rule:<name>", outside the baseline/canary split. Real gateway, real simfleet replicas."""

from __future__ import annotations

import datetime as dt
import http.client
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from pydantic import ValidationError

from gateway.routing import match_rule
from gateway.snapshot import Arm, Deployment, Replica, Route, RouteRule, Snapshot, Tenant
from tests.gateway.conftest import (
    ACME_KEY,
    GLOBEX_KEY,
    QA_KEY,
    GatewayLauncher,
    GatewayProcess,
    auth,
    chat_body,
    make_snapshot,
    publish,
    records,
    wait_for_version,
)
from tests.simfleet.harness import Fleet, FleetLauncher, model

# --- matching, as a pure function -----------------------------------------------------------------

ACME = Tenant(id="acme", slug="acme", tier="critical")
GLOBEX = Tenant(id="globex", slug="globex", tier="batch")


def rules_route(*rules: RouteRule) -> Route:
    return Route(
        name="chat", arms=(Arm(name="baseline", deployment_id="b", weight=100),), rules=rules
    )


def test_the_first_matching_rule_wins_and_bounds_are_inclusive() -> None:
    route = rules_route(
        RouteRule(name="pin", deployment_id="p", tenant_ids=frozenset({"acme"})),
        RouteRule(name="long", deployment_id="l", min_prompt_tokens=8001),
        RouteRule(name="batch", deployment_id="c", tiers=frozenset({"batch"})),
        RouteRule(name="short", deployment_id="s", max_prompt_tokens=10),
    )
    assert match_rule(route, ACME, 20_000) == Arm(name="rule:pin", deployment_id="p", weight=100)
    standard = Tenant(id="initech", slug="initech")
    chosen = [match_rule(route, GLOBEX, 8001), match_rule(route, GLOBEX, 8000)]
    chosen.append(match_rule(route, standard, 10))
    assert [arm.name if arm else None for arm in chosen] == [
        "rule:long",
        "rule:batch",
        "rule:short",
    ]
    assert match_rule(route, standard, 11) is None  # into the split


def test_every_condition_of_a_rule_must_hold() -> None:
    route = rules_route(
        RouteRule(
            name="big-batch",
            deployment_id="c",
            tiers=frozenset({"batch"}),
            min_prompt_tokens=100,
            max_prompt_tokens=200,
        )
    )
    assert match_rule(route, GLOBEX, 150) is not None
    assert match_rule(route, GLOBEX, 99) is None
    assert match_rule(route, GLOBEX, 201) is None
    assert match_rule(route, ACME, 150) is None


def test_a_rule_arm_is_built_once_with_the_snapshot() -> None:
    rule = RouteRule(name="long", deployment_id="l", min_prompt_tokens=1)
    assert rule.arm is rule.arm
    assert rule.arm.name == "rule:long"


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"name": "all", "deployment_id": "b"}, "matches every request"),
        (
            {"name": "odd", "deployment_id": "b", "min_prompt_tokens": 9, "max_prompt_tokens": 8},
            "min_prompt_tokens above max_prompt_tokens",
        ),
        ({"name": "x" * 41, "deployment_id": "b", "tiers": ["batch"]}, "pattern"),
        ({"name": "Caps", "deployment_id": "b", "tiers": ["batch"]}, "pattern"),
        ({"name": "t", "deployment_id": "b", "tiers": ["gold"]}, "critical"),
    ],
)
def test_the_schema_refuses_bad_rules(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RouteRule.model_validate(rule)


def _snapshot(**route: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "generated_at": dt.datetime.now(dt.UTC).isoformat(),
        "tenants": {"acme": {"id": "acme", "slug": "acme"}},
        "deployments": {"b": {"id": "b", "served_model_name": "m"}},
        "routes": {
            "chat": {
                "name": "chat",
                "arms": [{"name": "baseline", "deployment_id": "b", "weight": 100}],
                **route,
            }
        },
    }


@pytest.mark.parametrize(
    ("route", "message"),
    [
        (
            {"rules": [{"name": "x", "deployment_id": "gone", "min_prompt_tokens": 1}]},
            "rule 'x' names unknown deployment 'gone'",
        ),
        (
            {"rules": [{"name": "x", "deployment_id": "b", "tenant_ids": ["nobody"]}]},
            "rule 'x' names an unknown tenant",
        ),
        (
            {
                "rules": [
                    {"name": "x", "deployment_id": "b", "min_prompt_tokens": 1},
                    {"name": "x", "deployment_id": "b", "max_prompt_tokens": 1},
                ]
            },
            "two rules named the same",
        ),
        (
            {"arms": [{"name": "rule:x", "deployment_id": "b", "weight": 100}]},
            "arms must be baseline, canary and control",
        ),
    ],
)
def test_the_gateway_refuses_a_snapshot_with_inconsistent_rules(
    route: dict[str, Any], message: str
) -> None:
    assert Snapshot.model_validate(_snapshot()).routes["chat"].rules == ()
    with pytest.raises(ValidationError, match=message):
        Snapshot.model_validate(_snapshot(**route))


# --- through a gateway process --------------------------------------------------------------------


@pytest.fixture(scope="module")
def ruled_fleet(fleets: FleetLauncher) -> Fleet:
    """Three replicas serving a short-context model, a long-context one and a cheap one; each
    deployment below uses its own replica, so where a request went is visible per replica."""
    return fleets.start(
        [
            model("tiny", answer_tokens=5),
            model("long", answer_tokens=5, max_model_len=16384, kv_cache_tokens=65536),
            model("cheap", answer_tokens=5),
        ],
        replicas=3,
    )


def ruled_snapshot(fleet: Fleet, *rules: RouteRule, canary_weight: float = 0.0) -> Snapshot:
    """make_snapshot's route (baseline on replica 0, a canary on replica 0 too when weighted),
    plus a long-context deployment on replica 1 and a cheap one on replica 2, with `rules`."""
    snapshot = make_snapshot(
        fleet.urls[:1], fleet.urls[:1] if canary_weight else None, canary_weight=canary_weight
    )
    base = snapshot.deployments["base"].model_copy(update={"max_model_len": 1024})
    deployments = {
        **snapshot.deployments,
        "base": base,
        "long": Deployment(
            id="long",
            served_model_name="long",
            max_model_len=16384,
            replicas=(Replica(id="l0", base_url=fleet.urls[1]),),
        ),
        "cheap": Deployment(
            id="cheap",
            served_model_name="cheap",
            replicas=(Replica(id="x0", base_url=fleet.urls[2]),),
        ),
    }
    (name, route), *_ = snapshot.routes.items()
    tenants = {
        **snapshot.tenants,
        "globex": snapshot.tenants["globex"].model_copy(update={"tier": "batch"}),
    }
    return Snapshot.model_validate(
        snapshot.model_dump()
        | {
            "tenants": {k: v.model_dump() for k, v in tenants.items()},
            "deployments": {k: v.model_dump() for k, v in deployments.items()},
            "routes": {name: route.model_dump() | {"rules": [r.model_dump() for r in rules]}},
        }
    )


@pytest.fixture
def gateway(gateways: GatewayLauncher, redis_url: str) -> GatewayProcess:
    return gateways.start(redis_url=redis_url)


def apply(gateway: GatewayProcess, redis_url: str, snapshot: Snapshot) -> None:
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)


def post(
    gateway: GatewayProcess, body: dict[str, Any], key: str = ACME_KEY, **headers: str
) -> tuple[int, dict[str, Any]]:
    parts = urlsplit(gateway.url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20)
    try:
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=orjson.dumps(body),
            headers={"content-type": "application/json", **auth(key), **headers},
        )
        response = connection.getresponse()
        return response.status, orjson.loads(response.read())
    finally:
        connection.close()


def where(record: dict[str, Any]) -> tuple[str, str, str, int]:
    return record["arm"], record["dep"], record["replica"], record["status"]


def long_prompt(tokens: int) -> dict[str, Any]:
    # The gateway estimates 4 characters a token plus 4 per message; simfleet counts a word a
    # token, so both see about `tokens`.
    return chat_body(messages=[{"role": "user", "content": "abc " * (tokens - 4)}])


def test_long_prompts_go_to_the_long_context_deployment(
    gateway: GatewayProcess, ruled_fleet: Fleet, redis_url: str
) -> None:
    without_rule = ruled_snapshot(ruled_fleet)
    apply(gateway, redis_url, without_rule)
    # 2,000 tokens do not fit the baseline's 1,024-token context: the replica refuses them.
    status, body = post(gateway, long_prompt(2000))
    assert status == 400, body

    rule = RouteRule(name="long-context", deployment_id="long", min_prompt_tokens=800)
    apply(gateway, redis_url, ruled_snapshot(ruled_fleet, rule))
    status, body = post(gateway, long_prompt(2000))
    assert status == 200, body
    assert body["model"] == "support-chat"  # clients still see the route's name
    assert post(gateway, long_prompt(800))[0] == 200  # the bound is inclusive
    assert post(gateway, long_prompt(799))[0] == 200
    assert [where(r) for r in records(redis_url, 4)] == [
        ("baseline", "base", "b0", 400),
        ("rule:long-context", "long", "l0", 200),
        ("rule:long-context", "long", "l0", 200),
        ("baseline", "base", "b0", 200),
    ]


def test_batch_tier_tenants_go_to_the_cheaper_deployment(
    gateway: GatewayProcess, ruled_fleet: Fleet, redis_url: str
) -> None:
    rule = RouteRule(name="batch", deployment_id="cheap", tiers=frozenset({"batch"}))
    apply(gateway, redis_url, ruled_snapshot(ruled_fleet, rule))
    assert post(gateway, chat_body(), key=GLOBEX_KEY)[0] == 200  # batch tier
    assert post(gateway, chat_body(), key=ACME_KEY)[0] == 200  # standard tier
    by_tenant = {r["tenant"]: where(r) for r in records(redis_url, 2)}
    assert by_tenant == {
        "globex": ("rule:batch", "cheap", "x0", 200),
        "acme": ("baseline", "base", "b0", 200),
    }


def test_a_pinned_tenant_stays_off_a_live_canary_and_out_of_its_samples(
    gateway: GatewayProcess, ruled_fleet: Fleet, redis_url: str
) -> None:
    """With every session on the canary, the tenant pinned to the baseline's deployment still
    lands there, and its requests are neither baseline nor canary samples of the rollout."""
    pin = RouteRule(name="pin", deployment_id="base", tenant_ids=frozenset({"acme"}))
    apply(gateway, redis_url, ruled_snapshot(ruled_fleet, pin, canary_weight=100))
    for user in ("u1", "u2", "u3"):
        assert post(gateway, chat_body(user=user), key=ACME_KEY)[0] == 200
        assert post(gateway, chat_body(user=user), key=GLOBEX_KEY)[0] == 200
    # A QA key's forced arm does not reach past a rule that claims the request.
    forced = post(gateway, chat_body(), key=QA_KEY, **{"X-Tollgate-Arm": "canary"})
    assert forced[0] == 200
    seen = records(redis_url, 7)
    acme = {(r["arm"], r["dep"], r["rollout"]) for r in seen if r["tenant"] == "acme"}
    globex = {(r["arm"], r["dep"], r["rollout"]) for r in seen if r["tenant"] == "globex"}
    assert acme == {("rule:pin", "base", "r1")}
    assert globex == {("canary", "cand", "r1")}


def test_a_rule_is_gone_as_soon_as_a_snapshot_without_it_is_applied(
    gateway: GatewayProcess, ruled_fleet: Fleet, redis_url: str
) -> None:
    rule = RouteRule(name="batch", deployment_id="cheap", tiers=frozenset({"batch"}))
    apply(gateway, redis_url, ruled_snapshot(ruled_fleet, rule))
    assert post(gateway, chat_body(), key=GLOBEX_KEY)[0] == 200
    apply(gateway, redis_url, ruled_snapshot(ruled_fleet))
    assert post(gateway, chat_body(), key=GLOBEX_KEY)[0] == 200
    assert [r["arm"] for r in records(redis_url, 2)] == ["rule:batch", "baseline"]
