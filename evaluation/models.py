from __future__ import annotations

from django.db import models


class RequestSample(models.Model):
    """One request as the gateway measured it (its record on the samples stream)."""

    rid = models.CharField(max_length=100, unique=True)  # the response id the client got
    ts = models.DateTimeField(db_index=True)
    rollout_id = models.BigIntegerField(null=True, blank=True)
    route = models.CharField(max_length=100)
    arm = models.CharField(max_length=16)
    deployment = models.CharField(max_length=64)
    tenant = models.CharField(max_length=63)
    replica = models.CharField(max_length=200, blank=True)
    status = models.PositiveSmallIntegerField()
    finish = models.CharField(max_length=16, blank=True)
    prompt_tokens = models.PositiveIntegerField()
    output_tokens = models.PositiveIntegerField()
    ttft_ms = models.FloatField(null=True, blank=True)
    tpot_ms = models.FloatField(null=True, blank=True)
    e2e_ms = models.FloatField()
    tool = models.CharField(max_length=16, blank=True)
    concurrency = models.PositiveIntegerField(default=0)
    stream = models.BooleanField(default=False)
    cost = models.FloatField(default=0.0)

    class Meta:
        indexes = [models.Index(fields=["rollout_id", "arm", "ts"])]

    def __str__(self) -> str:
        return f"{self.rid} ({self.route}/{self.arm})"
