"""The tenants REST API: tenants, budgets, gateway keys, usage, and the caller's own API tokens.

Everything is read through the selectors with the caller, so a tenant admin's token reaches its
own tenant only: another tenant's slug is a 404 exactly like one that does not exist.
"""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import DomainError, PermissionDenied
from tenants import selectors
from tenants.api import serializers as s
from tenants.api.serializers import MeOutputSerializer
from tenants.choices import Scope
from tenants.models import ApiToken, Tenant, User
from tenants.permissions import TokenHasScopes
from tenants.services import accounts, budgets, gateway_keys
from tenants.services.budgets import BUDGET_FIELDS

READ, WRITE = (Scope.TENANTS_READ,), (Scope.TENANTS_WRITE,)
PERMISSIONS = [IsAuthenticated, TokenHasScopes]
SCOPES = {"GET": READ, "HEAD": READ, "POST": WRITE, "PATCH": WRITE}


class MeView(APIView):
    """Who the caller is: lets CI check a token and its scopes before doing real work."""

    @extend_schema(responses=MeOutputSerializer, operation_id="me")
    def get(self, request: Request) -> Response:
        user = cast(User, request.user)  # IsAuthenticated has run
        token = request.auth if isinstance(request.auth, ApiToken) else None
        data = {
            "username": user.get_username(),
            "role": user.role,
            "tenant": user.tenant.slug if user.tenant else None,
            "authenticated_by": "token" if token else "session",
            "scopes": token.scopes if token else None,
        }
        return Response(MeOutputSerializer(data).data)


def _tenant(request: Request, slug: str) -> Tenant:
    return selectors.tenant_get(request.user, slug)


def _key_manager(request: Request, slug: str) -> tuple[User, Tenant]:
    tenant = _tenant(request, slug)
    if not selectors.may_manage_keys(request.user, tenant):
        raise PermissionDenied("only this tenant's admins and release managers manage its keys")
    return cast(User, request.user), tenant


class TenantsView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=s.TenantOutput(many=True), operation_id="tenants_list")
    def get(self, request: Request) -> Response:
        tenants = selectors.visible_tenants(request.user).order_by("slug")
        return Response(s.TenantOutput(tenants, many=True).data)

    @extend_schema(
        request=s.TenantCreateInput,
        responses={201: s.TenantDetailOutput},
        operation_id="tenants_create",
        description="Onboards a tenant with its tier, fail mode and first budget (release "
        "managers only); audited, and published to the gateway within a second.",
    )
    def post(self, request: Request) -> Response:
        data = s.TenantCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        budget = s.BudgetInput(data=values.get("budget", {}))
        unknown = sorted(set(values.get("budget", {})) - set(BUDGET_FIELDS))
        if unknown:
            raise DomainError(
                f"budget: unknown fields {', '.join(unknown)}; the budget's fields are "
                f"{', '.join(BUDGET_FIELDS)}"
            )
        if not budget.is_valid():
            return Response({"budget": budget.errors}, status=status.HTTP_400_BAD_REQUEST)
        limits = dict(budget.validated_data)
        limits.pop("reason", None)
        tenant = accounts.tenant_onboard(
            actor=cast(User, request.user),
            slug=values["slug"],
            name=values["name"],
            tier=values["tier"],
            fail_mode=values["fail_mode"],
            limits=limits,
        )
        return Response(s.TenantDetailOutput(tenant).data, status=status.HTTP_201_CREATED)


class TenantView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=s.TenantDetailOutput, operation_id="tenants_get")
    def get(self, request: Request, slug: str) -> Response:
        return Response(s.TenantDetailOutput(_tenant(request, slug)).data)


class BudgetView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=s.BudgetOutput, operation_id="tenants_budget_get")
    def get(self, request: Request, slug: str) -> Response:
        return Response(s.BudgetOutput(selectors.budget_of(_tenant(request, slug))).data)

    @extend_schema(
        request=s.BudgetInput,
        responses=s.BudgetOutput,
        operation_id="tenants_budget_update",
        description="Changes the fields given (null removes a limit); release managers only. "
        "Audited with the old and new values and published to the gateway within a second.",
    )
    def patch(self, request: Request, slug: str) -> Response:
        tenant = _tenant(request, slug)
        if not selectors.may_edit_budgets(request.user):
            raise PermissionDenied("only release managers change budgets")
        data = s.BudgetInput(data=request.data)
        data.is_valid(raise_exception=True)
        limits = dict(data.validated_data)
        reason = limits.pop("reason", "")
        if not limits:
            raise DomainError("give at least one budget field to change")
        budget = budgets.budget_set(
            actor=cast(User, request.user), tenant=tenant, reason=reason, **limits
        )
        return Response(s.BudgetOutput(budget).data)


class ApiKeysView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=s.ApiKeyOutput(many=True), operation_id="tenants_keys_list")
    def get(self, request: Request, slug: str) -> Response:
        _, tenant = _key_manager(request, slug)
        return Response(s.ApiKeyOutput(selectors.api_keys(tenant), many=True).data)

    @extend_schema(
        request=s.ApiKeyCreateInput,
        responses={201: s.ApiKeyCreatedOutput},
        operation_id="tenants_keys_create",
        description="Issues a gateway key. The answer holds the secret; it is never shown again.",
    )
    def post(self, request: Request, slug: str) -> Response:
        actor, tenant = _key_manager(request, slug)
        data = s.ApiKeyCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        if values["can_force_arm"] and not actor.is_release_manager:
            raise PermissionDenied("only release managers issue keys that may force an arm")
        key, secret = gateway_keys.api_key_create(
            actor=actor,
            tenant=tenant,
            name=values["name"],
            allowed_routes=values["allowed_routes"],
            expires_at=values["expires_at"],
            can_force_arm=values["can_force_arm"],
        )
        body = {**s.ApiKeyOutput(key).data, "secret": secret}
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class ApiKeyRevokeView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(request=None, responses=s.ApiKeyOutput, operation_id="tenants_keys_revoke")
    def post(self, request: Request, slug: str, key_id: int) -> Response:
        actor, tenant = _key_manager(request, slug)
        key = selectors.api_key_get(tenant, key_id)
        return Response(
            s.ApiKeyOutput(gateway_keys.api_key_revoke(actor=actor, key_id=key.pk)).data
        )


class UsageView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(
        responses=s.UsageOutput,
        operation_id="tenants_usage",
        parameters=[
            OpenApiParameter(
                "range",
                str,
                enum=list(selectors.WINDOWS),
                description="last hour (minute buckets), day (hours) or 30 days (days)",
            )
        ],
    )
    def get(self, request: Request, slug: str) -> Response:
        tenant = _tenant(request, slug)
        name = request.query_params.get("range", selectors.DEFAULT_WINDOW)
        window = selectors.WINDOWS.get(name)
        if window is None:
            raise DomainError(f"range must be one of {', '.join(selectors.WINDOWS)}; got {name!r}")
        series = selectors.usage_series(tenant, window)
        buckets: list[dict[str, Any]] = [
            {
                "start": start,
                **vars(totals),
                "rejections": {
                    reason: counts[i] for reason, counts in series.rejections.items() if counts[i]
                },
            }
            for i, (start, totals) in enumerate(zip(series.buckets, series.totals, strict=True))
        ]
        by_route = [
            {
                "route": r.route,
                "arm": r.arm,
                "deployment": r.deployment,
                "model": r.model,
                **vars(r.totals),
            }
            for r in selectors.usage_by_route(tenant, window)
        ]
        data = {
            "tenant": tenant.slug,
            "range": window.name,
            "granularity": window.trunc,
            "buckets": buckets,
            "by_route": by_route,
            "recent_rejections": selectors.recent_rejections(tenant),
        }
        return Response(s.UsageOutput(data).data)


TOKENS = dict.fromkeys(("GET", "HEAD", "POST"), (Scope.TOKENS_WRITE,))


class ApiTokensView(APIView):
    """The caller's own API tokens. A token needs `tokens:write` to see or make tokens, and can
    make none wider than its owner's role allows."""

    permission_classes = PERMISSIONS
    required_scopes_by_method = TOKENS

    @extend_schema(responses=s.ApiTokenOutput(many=True), operation_id="tokens_list")
    def get(self, request: Request) -> Response:
        tokens = selectors.api_tokens_of(cast(User, request.user))
        return Response(s.ApiTokenOutput(tokens, many=True).data)

    @extend_schema(
        request=s.ApiTokenCreateInput,
        responses={201: s.ApiTokenCreatedOutput},
        operation_id="tokens_create",
        description="Issues an API token to the caller. The answer holds the secret; it is "
        "never shown again.",
    )
    def post(self, request: Request) -> Response:
        user = cast(User, request.user)
        data = s.ApiTokenCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        if isinstance(request.auth, ApiToken):
            _no_wider_than(request.auth, values["scopes"], values["expires_at"])
        token, secret = accounts.api_token_create(
            actor=user,
            user=user,
            name=values["name"],
            scopes=values["scopes"],
            expires_at=values["expires_at"],
        )
        body = {**s.ApiTokenOutput(token).data, "secret": secret}
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


def _no_wider_than(caller: ApiToken, scopes: list[str], expires_at: Any) -> None:
    """A token makes tokens narrower than itself, never wider or longer-lived."""
    beyond = sorted(set(scopes) - set(caller.scopes))
    if beyond:
        raise PermissionDenied(
            f"this token may give only the scopes it holds ({', '.join(caller.scopes)}); "
            f"not {', '.join(beyond)}"
        )
    if caller.expires_at is not None and (expires_at is None or expires_at > caller.expires_at):
        raise PermissionDenied(
            f"this token expires at {caller.expires_at.isoformat()}: a token it makes must "
            "expire by then (give expires_at)"
        )


class ApiTokenRevokeView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = TOKENS

    @extend_schema(request=None, responses=s.ApiTokenOutput, operation_id="tokens_revoke")
    def post(self, request: Request, token_id: int) -> Response:
        user = cast(User, request.user)
        token = selectors.api_token_of(user, token_id)
        return Response(
            s.ApiTokenOutput(accounts.api_token_revoke(actor=user, token_id=token.pk)).data
        )
