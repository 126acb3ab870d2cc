from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditEvent(models.Model):
    """One row per state change made by a person, a token or the system: who, what, why.

    Apps with a richer history of their own (rollout events, alias moves) keep it in their own
    tables; this log covers everything else, and every row names the tenant it concerns (if any)
    so that tenant admins can be shown their own tenant's events and nothing more.
    """

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Denormalised so the record survives the actor's deletion, and names "system" tasks.
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64)
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        return f"{self.actor_name} {self.action} {self.target_type}:{self.target_id}"


class IdempotencyRecord(models.Model):
    """The first answer to an API write sent with an `Idempotency-Key` header, kept for a day so
    that a retry gets that answer back instead of doing the write again (`core.idempotency`)."""

    # Whose key it is: a hash of the bearer token, or the signed-in user's id. One caller's keys
    # never collide with another's.
    caller = models.CharField(max_length=64)
    key = models.CharField(max_length=255)
    # A hash of the method, the path with its query and the body: the same key with another
    # request is the caller's mistake, answered 422.
    request_hash = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    content_type = models.CharField(max_length=200, blank=True)
    body = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["caller", "key"], name="idempotency_key_per_caller")
        ]

    def __str__(self) -> str:
        return f"{self.caller[:8]} {self.key}"
