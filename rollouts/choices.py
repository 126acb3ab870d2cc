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


class RolloutState(models.TextChoices):
    PENDING = "pending", "Pending"
    PREFLIGHT = "preflight", "Preflight"
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    PROMOTED = "promoted", "Promoted"
    ROLLED_BACK = "rolled_back", "Rolled back"
    ABORTED = "aborted", "Aborted"
    FAILED = "failed", "Failed"


# Named groups, so code asks "is it live?" rather than listing states.
# Live: not over yet (a route has at most one). Pending counts: it holds the route's slot.
LIVE_STATES = frozenset(
    {RolloutState.PENDING, RolloutState.PREFLIGHT, RolloutState.RUNNING, RolloutState.PAUSED}
)
TERMINAL_STATES = frozenset(
    {RolloutState.PROMOTED, RolloutState.ROLLED_BACK, RolloutState.ABORTED, RolloutState.FAILED}
)
