from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from tenants.choices import FailMode, Tier
from tenants.models import ApiKey, ApiToken, Budget, Tenant, User
from tenants.services.accounts import TENANT_FIELDS, tenant_create, tenant_update
from tenants.services.budgets import BUDGET_FIELDS, budget_set
from tenants.services.gateway_keys import api_key_revoke


def _actor(request: HttpRequest) -> User:
    assert isinstance(request.user, User)  # noqa: S101 -- the admin requires a signed-in user
    return request.user


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin[Tenant]):
    list_display = ["slug", "name", "tier", "fail_mode", "over_soft_limit", "created_at"]
    search_fields = ["slug", "name"]
    list_filter = ["tier", "fail_mode", "over_soft_limit"]
    readonly_fields = ["over_soft_limit", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Tenant | None = None) -> list[str]:
        # The slug names the tenant in URLs, audit rows and request records: fixed once made.
        return [*self.readonly_fields, "slug"] if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        # Through the services, so an admin edit is audited and reaches the gateway like any other.
        actor = _actor(request)
        if not change:
            created = tenant_create(
                actor=actor,
                slug=obj.slug,
                name=obj.name,
                tier=Tier(obj.tier),
                fail_mode=FailMode(obj.fail_mode),
            )
            obj.pk = created.pk
            return
        fields = {name: getattr(obj, name) for name in form.changed_data if name in TENANT_FIELDS}
        tenant_update(actor=actor, tenant_id=obj.pk, reason="Django admin", **fields)

    def has_delete_permission(self, request: HttpRequest, obj: Tenant | None = None) -> bool:
        # Deleting a tenant would drop its keys and usage unaudited; there is no such path yet.
        return False


@admin.register(User)
class UserAdmin(DjangoUserAdmin[User]):
    list_display = ["username", "email", "role", "tenant", "is_active", "last_login"]
    list_filter = ["role", "tenant", "is_active"]
    fieldsets = (*(DjangoUserAdmin.fieldsets or ()), ("Tollgate", {"fields": ("role", "tenant")}))


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    # The hash is useless to people and the secret is never stored: show the prefix only.
    list_display = ["name", "user", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    exclude = ["token_hash"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    search_fields = ["name", "prefix", "user__username"]

    def has_add_permission(self, request: object) -> bool:
        # A token created here would have no secret anyone could see: people make theirs on
        # /account/tokens/ or through /api/v1/tokens, pipelines with `manage.py create_api_token`.
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[ApiKey]):
    list_display = [
        "name",
        "tenant",
        "prefix",
        "can_force_arm",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["tenant", "can_force_arm"]
    exclude = ["key_hash"]
    search_fields = ["name", "prefix", "tenant__slug"]
    actions = ["revoke"]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        # Keys change only through the services (audited, published): here they are read, and
        # revoked with the action.
        return [f.name for f in ApiKey._meta.fields if f.name != "key_hash"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A key made here would have no secret anyone could see; keys are issued by the service.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ApiKey | None = None) -> bool:
        return False  # revoke instead: the audit trail keeps the key

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for key_id in queryset.values_list("pk", flat=True):
            api_key_revoke(actor=_actor(request), key_id=key_id)


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin[Budget]):
    list_display = [
        "tenant",
        "requests_per_minute",
        "tokens_per_day",
        "tokens_per_month",
        "max_concurrent_requests",
        "soft_limit_percent",
    ]
    search_fields = ["tenant__slug"]
    readonly_fields = ["updated_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Budget | None = None) -> list[str]:
        return [*self.readonly_fields, "tenant"] if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Budget, form: Any, change: bool) -> None:
        # Through budget_set: validated (soft-limit route), audited with old and new, published.
        fields = {name: getattr(obj, name) for name in form.changed_data if name in BUDGET_FIELDS}
        saved = budget_set(
            actor=_actor(request), tenant=obj.tenant, reason="Django admin", **fields
        )
        obj.pk = saved.pk

    def has_delete_permission(self, request: HttpRequest, obj: Budget | None = None) -> bool:
        return False  # clear the limits instead: the change is audited
