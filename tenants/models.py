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
