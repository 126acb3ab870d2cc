"""`Authorization: Bearer <token>` authentication for the REST API."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenants.models import ApiToken, User
from tenants.services.accounts import api_token_touch
from tenants.tokens import hash_secret


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[User, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        keyword, _, secret = header.partition(" ")
        if keyword != self.keyword:
            return None
        secret = secret.strip()
        if not secret or " " in secret:
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header: expected 'Bearer <api token>'."
            )
        token = (
            ApiToken.objects.select_related("user", "user__tenant")
            .filter(token_hash=hash_secret(secret))
            .first()
        )
        if token is None or token.revoked_at is not None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        if token.expires_at is not None and token.expires_at <= timezone.now():
            raise exceptions.AuthenticationFailed(
                f"API token {token.prefix}… expired at {token.expires_at.isoformat()}."
            )
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("The owner of this API token is deactivated.")
        api_token_touch(token=token)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (with WWW-Authenticate), not 403, when credentials are missing.
        return f'{self.keyword} realm="api"'
