from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from evaluation.choices import FeedbackValue, VerdictDecision
from rollouts.models import Deployment, Rollout


class RequestSample(models.Model):
    """One request as the gateway measured it (its record on the samples stream)."""

    rid = models.CharField(max_length=100, unique=True)  # the response id the client got
    ts = models.DateTimeField(db_index=True)
    rollout_id = models.BigIntegerField(null=True, blank=True)
    # The rollout step the request arrived in, resolved from the rollout's step start times when
    # the sample is stored (None outside a running step: preflight, or no rollout).
    step = models.PositiveSmallIntegerField(null=True, blank=True)
    route = models.CharField(max_length=100)
    # baseline, canary, or "rule:<name>" for requests a route rule sent elsewhere.
    arm = models.CharField(max_length=100)
    deployment = models.CharField(max_length=64)
    tenant = models.CharField(max_length=63)
    replica = models.CharField(max_length=200, blank=True)
    status = models.PositiveSmallIntegerField()
    finish = models.CharField(max_length=16, blank=True)
    # Why the gateway refused the request (finish "rejected"): a budget limit, "shed", ...
    reason = models.CharField(max_length=32, blank=True)
    prompt_tokens = models.PositiveIntegerField()
    # The gateway's estimate from what the client sent, the same whatever arm served it (the
    # judge adjusts for it); 0 where the gateway's record had none.
    prompt_estimate = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField()
    ttft_ms = models.FloatField(null=True, blank=True)
    tpot_ms = models.FloatField(null=True, blank=True)
    e2e_ms = models.FloatField()
    tool = models.CharField(max_length=16, blank=True)
    concurrency = models.PositiveIntegerField(default=0)
    stream = models.BooleanField(default=False)
    cost = models.FloatField(default=0.0)

    class Meta:
        indexes = [
            # The guardrails: an arm's samples since the step started.
            models.Index(fields=["rollout_id", "arm", "ts"]),
            # The judge: one step's samples of one arm, up to the window's last id.
            models.Index(fields=["rollout_id", "step", "arm", "id"]),
        ]

    def __str__(self) -> str:
        return f"{self.rid} ({self.route}/{self.arm})"


class Feedback(models.Model):
    """What an application reported about one response; one per response (a later report
    replaces the earlier one). Deleted with its sample by the retention policy."""

    sample = models.OneToOneField(RequestSample, on_delete=models.CASCADE, related_name="feedback")
    value = models.CharField(max_length=8, choices=FeedbackValue.choices)
    note = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.value} on {self.sample_id}"


class DeploymentCost(models.Model):
    """What a deployment's tokens cost to serve: the throughput a replica sustains, entered by a
    person (from a benchmark) or observed from Prometheus, and the utilisation to plan for."""

    deployment = models.OneToOneField(Deployment, on_delete=models.CASCADE, related_name="cost")
    # Tokens (prompt + output) per second one replica sustains; entered wins over observed.
    throughput_tokens_per_s = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.001)]
    )
    utilisation = models.FloatField(
        default=0.6, validators=[MinValueValidator(0.01), MaxValueValidator(1.0)]
    )
    # Tokens per second per replica actually served, as last read from Prometheus (already
    # includes the utilisation, so the formula uses it at 100%).
    observed_tokens_per_s = models.FloatField(null=True, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"cost of deployment {self.deployment_id}"


class Verdict(models.Model):
    """One look of the judge at one rollout step, reproducible from the stored samples: `window`
    names the samples it read (step, arms, the last sample id, and how many per arm)."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="verdicts")
    step = models.PositiveSmallIntegerField()
    looked_at = models.DateTimeField()
    final = models.BooleanField(default=False)
    decision = models.CharField(max_length=16, choices=VerdictDecision.choices)
    reason = models.TextField(blank=True)
    report = models.JSONField()
    window = models.JSONField()

    class Meta:
        ordering = ["looked_at", "id"]
        indexes = [models.Index(fields=["rollout", "step", "looked_at"])]

    def __str__(self) -> str:
        return f"rollout {self.rollout_id} step {self.step}: {self.decision}"
