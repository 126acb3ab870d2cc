"""`tollgate tenant create` and `tollgate token create`: who may use the fleet, and the tokens
that pipelines call the API with."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import click

from cli.context import Settings, note, pass_settings
from cli.params import KEY_VALUE

# Copies of the server's vocabularies (the CLI imports no app); tests/cli/test_vocabulary.py
# fails when they drift. tenants/services/budgets.py BUDGET_FIELDS: what --budget may set.
BUDGET_FIELDS = (
    "requests_per_minute",
    "input_tokens_per_minute",
    "output_tokens_per_minute",
    "tokens_per_day",
    "tokens_per_month",
    "max_concurrent_requests",
    "max_context_tokens",
    "max_output_tokens",
    "over_max_output",
    "default_output_allowance",
    "soft_limit_percent",
    "soft_limit_action",
    "soft_limit_route",
)
# tenants/choices.py Scope.
SCOPES = [
    "registry:read",
    "registry:write",
    "rollouts:read",
    "rollouts:write",
    "tenants:read",
    "tenants:write",
    "tokens:write",
]
_DURATION = re.compile(r"^(\d+)([dh])$")


def _budget_value(text: str) -> Any:
    """A --budget value as the API wants it: a number, null (no limit), or text (a choice)."""
    if text.strip().lower() in ("null", "none", ""):
        return None
    if text.strip().isdigit():
        return int(text)
    return text


def _budget(options: dict[str, int | None], extra: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    budget: dict[str, Any] = {key: value for key, value in options.items() if value is not None}
    for field, text in extra:
        if field not in BUDGET_FIELDS:
            raise click.BadParameter(
                f"{field!r} is not a budget field; one of {', '.join(BUDGET_FIELDS)}",
                param_hint="--budget",
            )
        budget[field] = _budget_value(text)
    return budget


@click.group("tenant")
def tenant_group() -> None:
    """Tenants of the gateway and their budgets."""


@tenant_group.command("create")
@click.argument("slug")
@click.option("--name", required=True, help="how pages show it")
@click.option(
    "--tier",
    type=click.Choice(["critical", "standard", "batch"]),
    help="priority at peak (the server's default: standard)",
)
@click.option(
    "--fail-mode",
    type=click.Choice(["open", "closed"]),
    help="when the budget store is down: serve without budget checks (open) or refuse "
    "(closed, the server's default)",
)
# The common limits have options of their own; --budget sets any field (the rest, or null).
@click.option("--requests-per-minute", type=click.IntRange(min=0))
@click.option("--input-tokens-per-minute", type=click.IntRange(min=0))
@click.option("--output-tokens-per-minute", type=click.IntRange(min=0))
@click.option("--tokens-per-day", type=click.IntRange(min=0))
@click.option("--tokens-per-month", type=click.IntRange(min=0))
@click.option("--max-concurrent-requests", type=click.IntRange(min=0))
@click.option(
    "--budget",
    "extra_budget",
    type=KEY_VALUE,
    multiple=True,
    help="FIELD=VALUE for any budget field, repeated (null: no limit): " + ", ".join(BUDGET_FIELDS),
)
@pass_settings
def tenant_create(
    settings: Settings,
    slug: str,
    name: str,
    tier: str | None,
    fail_mode: str | None,
    requests_per_minute: int | None,
    input_tokens_per_minute: int | None,
    output_tokens_per_minute: int | None,
    tokens_per_day: int | None,
    tokens_per_month: int | None,
    max_concurrent_requests: int | None,
    extra_budget: tuple[tuple[str, str], ...],
) -> None:
    """Create tenant SLUG with its budget; prints the slug."""
    body: dict[str, Any] = {"slug": slug, "name": name}
    # Left out unless given, so that the server's defaults (fail closed) stay the defaults.
    if tier:
        body["tier"] = tier
    if fail_mode:
        body["fail_mode"] = fail_mode
    limits = {
        "requests_per_minute": requests_per_minute,
        "input_tokens_per_minute": input_tokens_per_minute,
        "output_tokens_per_minute": output_tokens_per_minute,
        "tokens_per_day": tokens_per_day,
        "tokens_per_month": tokens_per_month,
        "max_concurrent_requests": max_concurrent_requests,
    }
    budget = _budget(limits, extra_budget)
    if budget:
        body["budget"] = budget
    tenant = settings.api().post("/api/v1/tenants", body)
    note(f"created tenant {tenant.get('slug', slug)} ({tenant.get('tier')} tier)")
    if settings.json_output:
        settings.print_json(tenant)
    else:
        click.echo(tenant.get("slug", slug))


def _expiry(value: str | None) -> str | None:
    """--expires-at as the API wants it (ISO 8601); 90d and 12h count from now."""
    if value is None:
        return None
    match = _DURATION.match(value.strip())
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        delta = dt.timedelta(days=amount) if unit == "d" else dt.timedelta(hours=amount)
        return (dt.datetime.now(dt.UTC) + delta).isoformat(timespec="seconds")
    try:
        dt.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither an ISO date/time (2027-01-31T00:00:00Z) nor 90d / 12h",
            param_hint="--expires-at",
        ) from None
    return value


@click.group("token")
def token_group() -> None:
    """The caller's own API tokens (needs tokens:write)."""


@token_group.command("create")
@click.option("--name", required=True, help="how lists show it, e.g. the pipeline's name")
@click.option(
    "--scope",
    "scopes",
    required=True,
    multiple=True,
    help=f"a scope it holds, repeated (or comma-separated): {', '.join(SCOPES)}",
)
@click.option("--expires-at", help="when it stops working: ISO date/time, or 90d / 12h from now")
@pass_settings
def token_create(
    settings: Settings, name: str, scopes: tuple[str, ...], expires_at: str | None
) -> None:
    """Make an API token for the caller; prints the secret alone on stdout.

    TOKEN=$(tollgate token create --name deploy --scope rollouts:write) keeps it; it is never
    shown again. The API refuses scopes beyond the caller's role.
    """
    wanted = [part.strip() for value in scopes for part in value.split(",") if part.strip()]
    unknown = sorted(set(wanted) - set(SCOPES))
    if unknown:
        raise click.BadParameter(
            f"unknown scope(s) {', '.join(unknown)}; one of {', '.join(SCOPES)}",
            param_hint="--scope",
        )
    body = {"name": name, "scopes": wanted, "expires_at": _expiry(expires_at)}
    token = settings.api().post("/api/v1/tokens", body)
    expiry = token.get("expires_at")
    held = ", ".join(token.get("scopes", []))
    until = f", expires {expiry}" if expiry else ", does not expire"
    note(f"token {token.get('name')!r} ({token.get('prefix')}…): {held}{until}")
    if settings.json_output:
        settings.print_json(token)
    else:
        click.echo(token["secret"])
