"""Applications report feedback with the gateway key they already hold (`Bearer tk_…`): it names
their tenant and the routes they may use, which is exactly what their feedback may concern."""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenants.models import ApiKey, ApiToken, User
from tenants.tokens import TENANT_KEY_PREFIX, hash_secret


class GatewayKeyHolder:
    """The caller behind a gateway key: authenticated, but no person and no role."""

    is_authenticated = True
    is_active = True
    is_release_manager = False

    def __init__(self, key: ApiKey) -> None:
        self.key = key

    def get_username(self) -> str:
        return f"key {self.key.prefix}… of {self.key.tenant.slug}"


class GatewayKeyAuthentication(authentication.BaseAuthentication):
    """Handles `Bearer tk_…` only; any other credential is left to the API token and session
    authentications that follow it."""

    def authenticate(self, request: Request) -> tuple[GatewayKeyHolder, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        keyword, _, secret = header.partition(" ")
        secret = secret.strip()
        if keyword != "Bearer" or not secret.startswith(TENANT_KEY_PREFIX):
            return None
        now = timezone.now()
        key = (
            ApiKey.objects.select_related("tenant")
            .filter(key_hash=hash_secret(secret), revoked_at__isnull=True)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
            .first()
        )
        if key is None:
            raise exceptions.AuthenticationFailed("Invalid, revoked or expired gateway key.")
        return GatewayKeyHolder(key), key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class FlaggerMetadataTokenAuthentication(authentication.BaseAuthentication):
    """Flagger's webhooks POST a JSON body and cannot set headers; the API token travels in the
    webhook's `metadata` as `token` instead. Used by the verdict endpoint only, after the usual
    header authentication."""

    def authenticate(self, request: Request) -> tuple[User, ApiToken] | None:
        if request.method != "POST" or not isinstance(request.data, dict):
            return None
        metadata = request.data.get("metadata")
        secret = metadata.get("token") if isinstance(metadata, dict) else None
        if not isinstance(secret, str) or not secret:
            return None
        now = timezone.now()
        token = (
            ApiToken.objects.select_related("user")
            .filter(token_hash=hash_secret(secret.strip()), revoked_at__isnull=True)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid, revoked or expired API token.")
        return token.user, token
