from django.db import models


class Provider(models.TextChoices):
    """How a fleet gets a deployment onto its replicas."""

    STATIC = "static", "Static (the replicas already serve it)"
    LORA = "lora", "LoRA (loaded at run time through vLLM's API)"
    SIMFLEET = "simfleet", "simfleet (simulated replicas)"


class ReplicaState(models.TextChoices):
    ACTIVE = "active", "Active"
    DRAINING = "draining", "Draining"
    DISABLED = "disabled", "Disabled"


class DeploymentKind(models.TextChoices):
    FULL = "full", "Full model"
    LORA = "lora", "LoRA adapter"


class DeploymentState(models.TextChoices):
    PENDING = "pending", "Pending"
    READY = "ready", "Ready"
    DRAINING = "draining", "Draining"
    RETIRED = "retired", "Retired"
    FAILED = "failed", "Failed"


class Stickiness(models.TextChoices):
    USER = "user", "The request's user field"
    SESSION = "session", "The X-Session-Id header"
    TENANT = "tenant", "The tenant"
