"""`tollgate token create` against a real control plane, and `tollgate tenant create`'s request
against a stand-in (its endpoint is not on the server yet)."""

from __future__ import annotations

import json
from collections.abc import Callable

from tenants.models import ApiToken
from tenants.tokens import hash_secret
from tests.cli.conftest import Invoke, Reply, StandIn, run_cli


def test_token_create_prints_the_secret_alone(tollgate: Invoke, token_maker: str) -> None:
    result = tollgate(
        *("token", "create", "--name", "deploy-job"),
        *("--scope", "rollouts:read", "--scope", "registry:read,registry:write"),
        *("--expires-at", "30d"),
        token=token_maker,
    )
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip()
    assert result.stdout == f"{secret}\n"  # TOKEN=$(tollgate token create ...) gets just this
    token = ApiToken.objects.get(token_hash=hash_secret(secret))
    assert token.name == "deploy-job"
    assert sorted(token.scopes) == ["registry:read", "registry:write", "rollouts:read"]
    assert token.expires_at is not None
    assert "token 'deploy-job'" in result.stderr
    assert secret not in result.stderr

    # The new token works.
    me = tollgate("--json", "rollout", "status", "1", token=secret)
    assert "Invalid or revoked" not in me.stderr


def test_token_create_as_json_holds_the_secret(tollgate: Invoke, token_maker: str) -> None:
    result = tollgate(
        "--json", "token", "create", "--name", "j", "--scope", "rollouts:read", token=token_maker
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert ApiToken.objects.filter(token_hash=hash_secret(body["secret"]), name="j").exists()


def test_an_unknown_scope_is_refused_before_any_request(tollgate: Invoke) -> None:
    result = tollgate("token", "create", "--name", "x", "--scope", "rollouts:everything")
    assert result.exit_code == 2
    assert "unknown scope(s) rollouts:everything" in result.stderr


def test_tenant_create_sends_the_tenant_and_its_budget(
    stand_in_factory: Callable[..., StandIn],
) -> None:
    created = {"slug": "acme", "name": "Acme", "tier": "critical", "fail_mode": "open"}
    stand_in = stand_in_factory(script=[Reply(201, created)])
    result = run_cli(
        [
            *("tenant", "create", "acme", "--name", "Acme", "--tier", "critical"),
            *("--fail-mode", "open", "--requests-per-minute", "600"),
            *("--tokens-per-day", "5000000", "--budget", "max_output_tokens=4096"),
            *("--budget", "soft_limit_action=route", "--budget", "soft_limit_route=null"),
        ],
        url=stand_in.url,
        token="t",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "acme\n"
    (seen,) = stand_in.seen
    assert (seen.method, seen.path) == ("POST", "/api/v1/tenants")
    assert json.loads(seen.body) == {
        "slug": "acme",
        "name": "Acme",
        "tier": "critical",
        "fail_mode": "open",
        "budget": {
            "requests_per_minute": 600,
            "tokens_per_day": 5000000,
            "max_output_tokens": 4096,
            "soft_limit_action": "route",
            "soft_limit_route": None,
        },
    }


def test_tenant_create_refuses_an_unknown_budget_field() -> None:
    result = run_cli(
        ["tenant", "create", "acme", "--name", "Acme", "--budget", "tokens_per_minute=5"],
        url=None,
        token=None,
    )
    assert result.exit_code == 2
    assert "'tokens_per_minute' is not a budget field" in result.stderr
