from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from tenants.choices import FailMode, Role, Scope, Tier


class Tenant(models.Model):
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    tier = models.CharField(max_length=16, choices=Tier.choices, default=Tier.STANDARD)
    fail_mode = models.CharField(max_length=8, choices=FailMode.choices, default=FailMode.CLOSED)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class User(AbstractUser):
    """A person (or a CI pipeline's service account) with exactly one role.

    A tenant admin is bound to one tenant and sees nothing of the others; the other roles are not
    bound to any tenant. The database enforces that pairing.
    """

    role = models.CharField(max_length=32, choices=Role.choices, default=Role.VIEWER)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="admins"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                name="tenant_admin_has_exactly_one_tenant",
                condition=(Q(role=Role.TENANT_ADMIN, tenant__isnull=False))
                | (~Q(role=Role.TENANT_ADMIN) & Q(tenant__isnull=True)),
            )
        ]

    # The role is the source of truth for what a person may do: release managers administer
    # the whole control plane (the Django admin included), nobody else holds model permissions.
    def has_perm(self, perm: str, obj: models.Model | None = None) -> bool:
        if self.is_active and self.role == Role.RELEASE_MANAGER:
            return True
        return super().has_perm(perm, obj)

    def has_module_perms(self, app_label: str) -> bool:
        if self.is_active and self.role == Role.RELEASE_MANAGER:
            return True
        return super().has_module_perms(app_label)

    @property
    def is_release_manager(self) -> bool:
        return self.role == Role.RELEASE_MANAGER

    @property
    def is_tenant_admin(self) -> bool:
        return self.role == Role.TENANT_ADMIN


class ApiToken(models.Model):
    """A bearer token for the REST API. Only its SHA-256 is stored; the token is shown once."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    # The first characters of the token, kept in clear so people can tell their tokens apart.
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    scopes = ArrayField(models.CharField(max_length=32, choices=Scope.choices), default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="api_token_name_unique_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class ApiKey(models.Model):
    """A tenant's key for the gateway (`Authorization: Bearer tk_…`). Stored as a SHA-256 only;
    the secret is shown once, at creation."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)
    # Routes the key may use; empty means every route open to its tenant.
    allowed_routes = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    # QA keys may pick the canary or baseline arm with the X-Tollgate-Arm header.
    can_force_arm = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"], name="api_key_name_unique_per_tenant"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class Budget(models.Model):
    """A tenant's limits, enforced by the gateway; an empty field means no limit."""

    class OverMaxOutput(models.TextChoices):
        CLAMP = "clamp", "Lower max_tokens to the limit"
        REJECT = "reject", "Refuse the request"

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="budget")
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    input_tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    output_tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_day = models.PositiveBigIntegerField(null=True, blank=True)
    tokens_per_month = models.PositiveBigIntegerField(null=True, blank=True)
    max_concurrent_requests = models.PositiveIntegerField(null=True, blank=True)
    max_context_tokens = models.PositiveIntegerField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    over_max_output = models.CharField(
        max_length=8, choices=OverMaxOutput.choices, default=OverMaxOutput.CLAMP
    )
    default_output_allowance = models.PositiveIntegerField(default=1024)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"budget of {self.tenant}"
