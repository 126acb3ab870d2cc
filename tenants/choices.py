from django.db import models


class Role(models.TextChoices):
    RELEASE_MANAGER = "release_manager", "Release manager"
    TENANT_ADMIN = "tenant_admin", "Tenant admin"
    VIEWER = "viewer", "Viewer"


class Tier(models.TextChoices):
    """Priority at peak: when capacity is short, higher tiers are admitted first."""

    CRITICAL = "critical", "Critical"
    STANDARD = "standard", "Standard"
    BATCH = "batch", "Batch"


class FailMode(models.TextChoices):
    """What the gateway does with this tenant's requests when the budget store is unreachable."""

    OPEN = "open", "Fail open (serve without budget checks)"
    CLOSED = "closed", "Fail closed (refuse with 503)"


class Scope(models.TextChoices):
    """What an API token may do; a token never exceeds its owner's role."""

    REGISTRY_READ = "registry:read", "Read the model registry"
    REGISTRY_WRITE = "registry:write", "Register artifacts, lineage, evals and aliases"
    ROLLOUTS_READ = "rollouts:read", "Read rollouts"
    ROLLOUTS_WRITE = "rollouts:write", "Start, pause, promote and roll back rollouts"
    TENANTS_READ = "tenants:read", "Read tenants, budgets and usage"
    TENANTS_WRITE = "tenants:write", "Manage tenants, budgets and keys"
    TOKENS_WRITE = "tokens:write", "Create, list and revoke the owner's own API tokens"


# The scopes a token of each role may hold: a token narrows its owner's role, never widens it.
ROLE_SCOPES: dict[str, frozenset[str]] = {
    Role.RELEASE_MANAGER: frozenset(Scope.values),
    Role.TENANT_ADMIN: frozenset(
        {Scope.REGISTRY_READ, Scope.ROLLOUTS_READ, Scope.TENANTS_READ, Scope.TENANTS_WRITE}
        | {Scope.TOKENS_WRITE}
    ),
    Role.VIEWER: frozenset(
        {Scope.REGISTRY_READ, Scope.ROLLOUTS_READ, Scope.TENANTS_READ, Scope.TOKENS_WRITE}
    ),
}


class SoftLimitAction(models.TextChoices):
    """What the gateway does with a tenant's requests past the budget's soft limit."""

    REJECT = "reject", "Refuse requests"
    ROUTE = "route", "Send requests to a cheaper route"


class Granularity(models.TextChoices):
    MINUTE = "minute", "Minute"
    HOUR = "hour", "Hour"
    DAY = "day", "Day (UTC)"
