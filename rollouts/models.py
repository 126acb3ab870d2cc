from __future__ import annotations

from decimal import Decimal

from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from registry.models import ModelArtifact
from rollouts.choices import (
    DeploymentKind,
    DeploymentState,
    Provider,
    ReplicaState,
    RolloutState,
    Stickiness,
)
from rollouts.plans import Plan, SloGates
from tenants.choices import Tier
from tenants.models import Tenant, User


class Fleet(models.Model):
    """A pool of identical vLLM servers (or simfleet replicas) and what an hour of it costs."""

    name = models.SlugField(max_length=100, unique=True)
    provider = models.CharField(max_length=16, choices=Provider.choices, default=Provider.STATIC)
    gpu_type = models.CharField(max_length=100, blank=True)
    gpus_per_replica = models.PositiveSmallIntegerField(default=1)
    dollars_per_gpu_hour = models.DecimalField(max_digits=8, decimal_places=4, default=Decimal("0"))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Replica(models.Model):
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="replicas")
    name = models.SlugField(max_length=100)
    base_url = models.URLField(max_length=500)
    state = models.CharField(max_length=16, choices=ReplicaState.choices, default="active")
    # Set by the health probe (a real inference), not by hand.
    healthy = models.BooleanField(default=True)
    last_probe_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["fleet", "name"]
        constraints = [
            models.UniqueConstraint(fields=["fleet", "name"], name="replica_name_per_fleet"),
            models.UniqueConstraint(fields=["fleet", "base_url"], name="replica_url_per_fleet"),
        ]

    def __str__(self) -> str:
        return f"{self.fleet}/{self.name}"


class DeploymentQuerySet(models.QuerySet["Deployment"]):
    def in_use(self, routes: models.QuerySet[Route] | None = None) -> DeploymentQuerySet:
        """Deployments that serve traffic: the baseline, canary or control of a route, or the
        target of one of its rules — of `routes`, or of any route. The one definition retiring,
        probing and visibility share: what is in use is never retired, and always probed."""
        routes = Route.objects.all() if routes is None else routes
        return self.filter(
            models.Q(pk__in=routes.values("baseline"))
            | models.Q(pk__in=routes.exclude(canary=None).values("canary"))
            | models.Q(pk__in=routes.exclude(control=None).values("control"))
            | models.Q(pk__in=RouteRule.objects.filter(route__in=routes).values("target"))
        )


class Deployment(models.Model):
    """An artifact served on a fleet under a served-model name."""

    artifact = models.ForeignKey(
        ModelArtifact, on_delete=models.PROTECT, related_name="deployments"
    )
    fleet = models.ForeignKey(Fleet, on_delete=models.PROTECT, related_name="deployments")
    served_model_name = models.CharField(max_length=200)
    kind = models.CharField(max_length=8, choices=DeploymentKind.choices, default="full")
    # The context length the replicas serve it with (vLLM's --max-model-len), when known. The
    # lower bounds here and below are the gateway's snapshot schema's (gateway/snapshot.py).
    max_model_len = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )
    # The served model's tokenizer (tokenizer.json and tokenizer_config.json with its chat
    # template), as a directory on the gateway's hosts: prompts are then counted exactly, as
    # the replicas count them, instead of bounded by their bytes.
    tokenizer_dir = models.CharField(max_length=500, blank=True)
    state = models.CharField(max_length=16, choices=DeploymentState.choices, default="pending")
    # Why a pending deployment is not ready yet (or why it failed): the provider's and the
    # real-inference preflight's problems, one line a replica.
    problems = models.JSONField(default=list, blank=True)
    # Saturation as last read from Prometheus; the gateway sheds lower tiers above the limits.
    kv_cache_usage = models.FloatField(default=0.0)
    waiting_requests = models.PositiveIntegerField(default=0)
    max_in_flight_per_replica = models.PositiveIntegerField(
        default=256, validators=[MinValueValidator(1)]
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = DeploymentQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["fleet", "served_model_name"],
                condition=~models.Q(state__in=["retired", "failed"]),
                name="one_live_deployment_per_served_name",
            )
        ]

    def __str__(self) -> str:
        return f"{self.artifact} on {self.fleet} as {self.served_model_name}"


class Route(models.Model):
    """The model name clients ask for, split between a baseline and (during a rollout) a
    canary deployment, and a control deployment when the rollout has one."""

    name = models.CharField(max_length=100, unique=True)
    baseline = models.ForeignKey(Deployment, on_delete=models.PROTECT, related_name="+")
    canary = models.ForeignKey(
        Deployment, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    canary_weight = models.FloatField(
        default=0.0, validators=[MinValueValidator(0.0), MaxValueValidator(100.0)]
    )
    # During a rollout with a control arm: a second deployment of the baseline, given the
    # canary's share (as far as the baseline has it to give), so the judge compares like loads.
    control = models.ForeignKey(
        Deployment, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    stickiness = models.CharField(max_length=8, choices=Stickiness.choices, default="user")
    # Changes with every rollout, so each draws its own canary cohort.
    salt = models.CharField(max_length=64, blank=True)
    # Tenants that may use the route; none means every tenant.
    tenants = models.ManyToManyField(Tenant, blank=True, related_name="routes")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


# A rule's requests are recorded under the arm "rule:<name>" (a sample's arm holds 100
# characters); short, since it also labels the gateway's metrics.
RULE_NAME_MAX_LENGTH = 40


class RouteRule(models.Model):
    """Sends the requests of a route that match it to its own deployment, outside the route's
    baseline/canary split: long prompts to a long-context deployment, batch-tier tenants to a
    cheaper one, a tenant pinned to one version.

    A request matches when every condition given holds (tenants and tiers: any of those listed;
    prompt tokens: the gateway's estimate, bounds inclusive). Rules are tried by `order`; the first
    match wins. A rule whose deployment is no longer ready is not published: its requests go back
    to the split rather than to a deployment that is draining or gone."""

    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="rules")
    name = models.CharField(
        max_length=RULE_NAME_MAX_LENGTH,
        validators=[
            RegexValidator(
                r"^[a-z0-9][a-z0-9_-]*$",
                "Use lower-case letters, digits, - and _, starting with a letter or digit.",
            )
        ],
    )
    order = models.PositiveSmallIntegerField()
    tenants = models.ManyToManyField(Tenant, blank=True, related_name="+")
    tiers = ArrayField(
        models.CharField(max_length=16, choices=Tier.choices), default=list, blank=True
    )
    min_prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    max_prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    target = models.ForeignKey(Deployment, on_delete=models.PROTECT, related_name="route_rules")
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["route", "order"]
        constraints = [
            models.UniqueConstraint(fields=["route", "name"], name="route_rule_name_per_route"),
            models.UniqueConstraint(fields=["route", "order"], name="route_rule_order_per_route"),
            models.CheckConstraint(
                name="route_rule_prompt_range_ordered",
                condition=models.Q(min_prompt_tokens__isnull=True)
                | models.Q(max_prompt_tokens__isnull=True)
                | models.Q(min_prompt_tokens__lte=models.F("max_prompt_tokens")),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.route}: rule {self.name}"

    @property
    def arm_name(self) -> str:
        """The arm its requests are recorded under."""
        return f"rule:{self.name}"


class PlanTemplate(models.Model):
    """A saved rollout plan and its SLO gates, picked by name in the create form or by CI."""

    name = models.SlugField(max_length=100, unique=True)
    description = models.CharField(max_length=500, blank=True)
    plan = models.JSONField()  # rollouts.plans.Plan
    gates = models.JSONField()  # rollouts.plans.SloGates
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def parsed_plan(self) -> Plan:
        return Plan.model_validate(self.plan)

    @property
    def parsed_gates(self) -> SloGates:
        return SloGates.model_validate(self.gates)


class Rollout(models.Model):
    """A candidate deployment walked through the plan's steps on a route."""

    route = models.ForeignKey(Route, on_delete=models.PROTECT, related_name="rollouts")
    baseline = models.ForeignKey(Deployment, on_delete=models.PROTECT, related_name="+")
    candidate = models.ForeignKey(Deployment, on_delete=models.PROTECT, related_name="+")
    # Optional: a second deployment of the baseline's artifact that runs beside the canary at the
    # same weight, so the candidate is compared with a copy of the baseline under the same load.
    control = models.ForeignKey(
        Deployment, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    plan = models.JSONField()  # rollouts.plans.Plan
    gates = models.JSONField()  # rollouts.plans.SloGates
    state = models.CharField(max_length=16, choices=RolloutState.choices, default="pending")
    step_index = models.PositiveSmallIntegerField(default=0)
    step_started_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # One live rollout per route: two would fight over its weights.
            models.UniqueConstraint(
                fields=["route"],
                condition=models.Q(state__in=["pending", "preflight", "running", "paused"]),
                name="one_live_rollout_per_route",
            )
        ]

    def __str__(self) -> str:
        return f"rollout {self.pk} of {self.candidate} on {self.route}"

    @property
    def parsed_plan(self) -> Plan:
        return Plan.model_validate(self.plan)

    @property
    def parsed_gates(self) -> SloGates:
        return SloGates.model_validate(self.gates)

    @property
    def current_weight(self) -> float:
        if self.state == RolloutState.PROMOTED:
            return 100.0
        if self.state not in (RolloutState.RUNNING, RolloutState.PAUSED):
            return 0.0
        return self.parsed_plan.steps[self.step_index].weight


def control_weight(canary_weight: float) -> float:
    """The control arm's share: the canary's, as far as the baseline has it to give (at 50% the
    baseline's whole share goes to the control; at 100% there is nothing left to compare)."""
    return max(0.0, min(canary_weight, 100.0 - canary_weight))


class RolloutEvent(models.Model):
    """Every state change of a rollout: who, why, and the evidence it rested on."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="events")
    from_state = models.CharField(max_length=16, choices=RolloutState.choices)
    to_state = models.CharField(max_length=16, choices=RolloutState.choices)
    step_index = models.PositiveSmallIntegerField()
    actor = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150)
    reason = models.TextField()
    evidence = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.rollout_id}: {self.from_state} -> {self.to_state}"


class Webhook(models.Model):
    """Where rollout events are announced (chat, CI). Bodies are signed with HMAC-SHA256 of
    `secret`, which is kept in clear because signing needs it; it is shown once, at creation."""

    name = models.CharField(max_length=100, unique=True)
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=100)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
