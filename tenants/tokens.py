"""Secret generation and hashing for API tokens (and, later, tenant API keys).

Tokens are 256 random bits, so a plain SHA-256 is enough at rest: there is nothing to brute-force
that a slow password hash would protect, and lookups stay a single indexed equality.
"""

from __future__ import annotations

import hashlib
import secrets

# Markers, not secrets: API tokens for the REST API, tenant keys for the gateway.
TOKEN_PREFIX = "tg_"  # noqa: S105
TENANT_KEY_PREFIX = "tk_"
VISIBLE_PREFIX_LENGTH = 10


def new_secret(prefix: str = TOKEN_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def visible_prefix(secret: str) -> str:
    return secret[:VISIBLE_PREFIX_LENGTH]
