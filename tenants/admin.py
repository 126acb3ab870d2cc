from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin

from tenants.models import ApiKey, ApiToken, Budget, Tenant, User


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin[Tenant]):
    list_display = ["slug", "name", "tier", "fail_mode", "created_at"]
    search_fields = ["slug", "name"]
    list_filter = ["tier", "fail_mode"]


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
        # A token created here would have no secret anyone could see; issue tokens via the API.
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[ApiKey]):
    list_display = ["name", "tenant", "prefix", "can_force_arm", "created_at", "revoked_at"]
    list_filter = ["tenant", "can_force_arm"]
    exclude = ["key_hash"]
    readonly_fields = ["prefix", "created_at", "created_by"]
    search_fields = ["name", "prefix", "tenant__slug"]

    def has_add_permission(self, request: object) -> bool:
        # A key made here would have no secret anyone could see; keys are issued by the service.
        return False


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin[Budget]):
    list_display = ["tenant", "requests_per_minute", "tokens_per_day", "max_concurrent_requests"]
    search_fields = ["tenant__slug"]
