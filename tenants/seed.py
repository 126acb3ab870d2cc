"""Demo tenants, people and the CI token, created by `manage.py seed_demo` (idempotent)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from django.conf import settings

from tenants.choices import Role, Scope, Tier
from tenants.models import ApiKey, ApiToken, Tenant, User
from tenants.services.accounts import api_token_create, tenant_create, user_create
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create
from tenants.tokens import TENANT_KEY_PREFIX, TOKEN_PREFIX, hash_secret, visible_prefix

DEMO_PASSWORD = "tollgate-demo"  # noqa: S105 -- the published demo password

TENANTS = [
    ("acme", "Acme Support", Tier.CRITICAL),
    ("globex", "Globex Research", Tier.BATCH),
]
# Acme's limits are roomy; Globex's are tight enough to see a 429 from a laptop.
BUDGETS: dict[str, dict[str, int | str | None]] = {
    "acme": {
        "requests_per_minute": 6000,
        "tokens_per_day": 50_000_000,
        "max_concurrent_requests": 256,
        "max_output_tokens": 2048,
    },
    "globex": {
        "requests_per_minute": 60,
        "input_tokens_per_minute": 20_000,
        "output_tokens_per_minute": 20_000,
        "tokens_per_day": 1_000_000,
        "max_concurrent_requests": 8,
        "max_output_tokens": 512,
        "over_max_output": "reject",
    },
}
DEMO_KEY_NAME = "demo"
PEOPLE = [
    ("release", Role.RELEASE_MANAGER, None),
    ("acme-admin", Role.TENANT_ADMIN, "acme"),
    ("globex-admin", Role.TENANT_ADMIN, "globex"),
    ("viewer", Role.VIEWER, None),
]
CI_USER = "ci-pipeline"
CI_TOKEN_NAME = "demo-ci"  # noqa: S105 -- a name, not a secret
CI_SCOPES = [
    Scope.REGISTRY_READ,
    Scope.REGISTRY_WRITE,
    Scope.ROLLOUTS_READ,
    Scope.ROLLOUTS_WRITE,
]


def demo_secret(purpose: str, prefix: str = TOKEN_PREFIX) -> str:
    """A secret derived from SECRET_KEY, so every seeding run prints the same demo token while
    only its hash is stored. Demo data only: real tokens are random (tenants.tokens.new_secret)."""
    digest = hmac.new(settings.SECRET_KEY.encode(), purpose.encode(), hashlib.sha256).digest()
    return prefix + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _ensure_user(username: str, role: Role, tenant: Tenant | None, password: str | None) -> User:
    user = User.objects.filter(username=username).first()
    if user is None:
        return user_create(
            actor=None, username=username, role=role, tenant=tenant, password=password
        )
    # Someone may have changed the demo user since the last run: put it back as documented.
    user.role, user.tenant, user.is_active = role, tenant, True
    user.is_staff = role == Role.RELEASE_MANAGER
    if password is not None and not user.check_password(password):
        user.set_password(password)
    user.save()
    return user


def _ensure_ci_token(user: User) -> str:
    secret = demo_secret("demo-ci-token")
    token = ApiToken.objects.filter(user=user, name=CI_TOKEN_NAME).first()
    if token is None:
        api_token_create(actor=None, user=user, name=CI_TOKEN_NAME, scopes=CI_SCOPES, secret=secret)
    elif token.token_hash != hash_secret(secret) or token.revoked_at is not None:
        # SECRET_KEY changed (or the token was revoked): re-key the demo token in place.
        token.token_hash, token.prefix, token.revoked_at = (
            hash_secret(secret),
            visible_prefix(secret),
            None,
        )
        token.save(update_fields=["token_hash", "prefix", "revoked_at"])
    return secret


def demo_tenant_key(slug: str) -> str:
    return demo_secret(f"tenant-key:{slug}", prefix=TENANT_KEY_PREFIX)


def _ensure_tenant_key(tenant: Tenant) -> str:
    secret = demo_tenant_key(tenant.slug)
    key = ApiKey.objects.filter(tenant=tenant, name=DEMO_KEY_NAME).first()
    if key is None:
        api_key_create(actor=None, tenant=tenant, name=DEMO_KEY_NAME, secret=secret)
    elif key.key_hash != hash_secret(secret) or key.revoked_at is not None:
        key.key_hash, key.prefix, key.revoked_at = hash_secret(secret), visible_prefix(secret), None
        key.save(update_fields=["key_hash", "prefix", "revoked_at"])
    return secret


def seed() -> dict[str, Any]:
    tenants: dict[str, Tenant] = {}
    for slug, name, tier in TENANTS:
        existing = Tenant.objects.filter(slug=slug).first()
        tenants[slug] = existing or tenant_create(actor=None, slug=slug, name=name, tier=tier)
    logins = []
    for username, role, tenant_slug in PEOPLE:
        tenant = tenants[tenant_slug] if tenant_slug else None
        _ensure_user(username, role, tenant, DEMO_PASSWORD)
        logins.append(
            {"username": username, "password": DEMO_PASSWORD, "role": role, "tenant": tenant_slug}
        )
    ci_user = _ensure_user(CI_USER, Role.RELEASE_MANAGER, None, None)
    keys = {}
    for slug, tenant in tenants.items():
        budget_set(actor=None, tenant=tenant, reason="demo seed", **BUDGETS[slug])
        keys[slug] = _ensure_tenant_key(tenant)
    return {
        "tenants": sorted(tenants),
        "tenant_api_keys": keys,
        "logins": logins,
        "ci_token": {"username": ci_user.username, "token": _ensure_ci_token(ci_user)},
    }
