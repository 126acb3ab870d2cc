from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from tenants.choices import FailMode, Granularity, Role, Scope, SoftLimitAction, Tier


class Tenant(models.Model):
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    tier = models.CharField(max_length=16, choices=Tier.choices, default=Tier.STANDARD)
    fail_mode = models.CharField(max_length=8, choices=FailMode.choices, default=FailMode.CLOSED)
    # Set by the soft-limit check (workers/usage.py) while today's or this month's tokens are
    # past the budget's soft limit; published to the gateway, which then applies the action.
    over_soft_limit = models.BooleanField(default=False)
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
    # The gateway never writes to Postgres: the usage consumer sets this from the request
    # records that name their key (minute precision), so it stays empty until they do.
    last_used_at = models.DateTimeField(null=True, blank=True)

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
    # At least 1, as the gateway's snapshot schema requires (gateway/snapshot.py): a request that
    # names no max_tokens reserves this many output tokens.
    default_output_allowance = models.PositiveIntegerField(
        default=1024, validators=[MinValueValidator(1)]
    )
    # Past this share of tokens/day or tokens/month the soft-limit action applies (None: none).
    soft_limit_percent = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    soft_limit_action = models.CharField(
        max_length=8, choices=SoftLimitAction.choices, default=SoftLimitAction.REJECT
    )
    # The cheaper route requests go to past the soft limit (action "route"); checked by
    # budget_set against rollouts' routes, which this app may not import.
    soft_limit_route = models.CharField(max_length=100, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"budget of {self.tenant}"


class UsageRollup(models.Model):
    """What a tenant sent through the gateway in one minute, hour or UTC day, per route, arm
    and deployment. Written only by tenants.usage (bulk upserts that add counts); every request
    counts in one row of each granularity, so long ranges read the coarse rows alone and old
    minute rows can be dropped without losing totals."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage")
    granularity = models.CharField(max_length=8, choices=Granularity.choices)
    bucket = models.DateTimeField()  # start of the minute, hour or day, UTC
    route = models.CharField(max_length=100)
    arm = models.CharField(max_length=100)  # "baseline", "canary" or "rule:<name>"
    # rollouts.Deployment's id as the gateway records it (no foreign key: this app does not
    # depend on rollouts, and usage outlives retired deployments).
    deployment = models.CharField(max_length=64)
    requests = models.PositiveBigIntegerField(default=0)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    errors = models.PositiveBigIntegerField(default=0)
    rejected = models.PositiveBigIntegerField(default=0)
    # Refusals by the limit that fired ("tokens_per_day", "shed", …) -> count.
    rejections = models.JSONField(default=dict)
    cost = models.FloatField(default=0.0)  # dollars

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "granularity", "bucket", "route", "arm", "deployment"],
                name="usage_rollup_one_row_per_bucket",
            )
        ]
        indexes = [models.Index(fields=["granularity", "bucket"], name="usage_rollup_by_bucket")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.granularity} {self.bucket:%Y-%m-%d %H:%M} {self.route}"


class UsageEntry(models.Model):
    """A samples-stream entry already counted: written in the transaction that counts it, so an
    entry delivered again (its consumer died between commit and acknowledgement) counts once.
    Pruned after a day; the stream never redelivers an entry that old."""

    stream_id = models.CharField(max_length=32, unique=True)
    processed_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return self.stream_id


class RecentRejection(models.Model):
    """The last refusals of each tenant with the limit that fired; kept to a few dozen each."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="recent_rejections")
    at = models.DateTimeField()
    route = models.CharField(max_length=100)
    arm = models.CharField(max_length=100)
    reason = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    request_id = models.CharField(max_length=100)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["tenant", "-at"], name="recent_rejection_by_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.at:%H:%M:%S} {self.reason}"
