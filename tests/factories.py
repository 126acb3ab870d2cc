from __future__ import annotations

import hashlib
import uuid
from typing import Any

from django.utils import timezone
from factory.declarations import (
    LazyAttribute,
    LazyFunction,
    SelfAttribute,
    Sequence,
    SubFactory,
    Trait,
)
from factory.django import DjangoModelFactory
from factory.helpers import post_generation

from evaluation.models import RequestSample
from registry.choices import ArtifactFormat, EvalSource, Relation
from registry.models import EvalRun, EvalScore, LineageEdge, ModelArtifact, PromotionGate
from rollouts.models import Deployment, Fleet, Replica, Rollout, Route
from rollouts.plans import DEFAULT_PLAN, SloGates
from tenants.choices import Role
from tenants.models import Tenant, User

PASSWORD = "correct-horse-battery"


class TenantFactory(DjangoModelFactory[Tenant]):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = Sequence(lambda n: f"tenant-{n}")
    name = LazyAttribute(lambda t: t.slug.title())


class UserFactory(DjangoModelFactory[User]):
    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = Sequence(lambda n: f"user-{n}")
    role = Role.VIEWER
    is_staff = LazyAttribute(lambda u: u.role == Role.RELEASE_MANAGER)

    @post_generation
    def password(obj: User, create: bool, extracted: str | None, **kwargs: Any) -> None:
        obj.set_password(extracted or PASSWORD)
        if create:
            obj.save(update_fields=["password"])


class ModelArtifactFactory(DjangoModelFactory[ModelArtifact]):
    class Meta:
        model = ModelArtifact

    family = "support-chat"
    version = Sequence(lambda n: f"v{n}")
    uri = LazyAttribute(lambda a: f"s3://models/{a.family}/{a.version}/")
    digest = LazyAttribute(lambda a: hashlib.sha256(f"{a.family}:{a.version}".encode()).hexdigest())
    format = ArtifactFormat.SAFETENSORS
    size_bytes = 16_060_522_496
    served_model_name = LazyAttribute(lambda a: a.family)


class LineageEdgeFactory(DjangoModelFactory[LineageEdge]):
    class Meta:
        model = LineageEdge

    child = SubFactory(ModelArtifactFactory)
    parent = SubFactory(ModelArtifactFactory)
    relation = Relation.FINETUNE


class EvalRunFactory(DjangoModelFactory[EvalRun]):
    class Meta:
        model = EvalRun

    artifact = SubFactory(ModelArtifactFactory)
    source = EvalSource.SCORES
    suite = "nightly"


class EvalScoreFactory(DjangoModelFactory[EvalScore]):
    class Meta:
        model = EvalScore

    run = SubFactory(EvalRunFactory)
    task = "arc_easy"
    metric = "acc"
    value = 0.75
    stderr = 0.01
    higher_is_better = True
    n_shot = 0


class PromotionGateFactory(DjangoModelFactory[PromotionGate]):
    class Meta:
        model = PromotionGate

    family = "support-chat"
    task = "arc_easy"
    metric = "acc"
    min_value = 0.7


class FleetFactory(DjangoModelFactory[Fleet]):
    class Meta:
        model = Fleet

    name = Sequence(lambda n: f"fleet-{n}")


class ReplicaFactory(DjangoModelFactory[Replica]):
    class Meta:
        model = Replica

    fleet = SubFactory(FleetFactory)
    name = Sequence(lambda n: f"r{n}")
    base_url = Sequence(lambda n: f"http://127.0.0.1:{9101 + n}")


class DeploymentFactory(DjangoModelFactory[Deployment]):
    class Meta:
        model = Deployment

    artifact = SubFactory(ModelArtifactFactory)
    fleet = SubFactory(FleetFactory)
    served_model_name = LazyAttribute(lambda d: f"{d.artifact.family}-{d.artifact.version}")


class RouteFactory(DjangoModelFactory[Route]):
    class Meta:
        model = Route

    name = Sequence(lambda n: f"route-{n}")
    baseline = SubFactory(DeploymentFactory)


class RolloutFactory(DjangoModelFactory[Rollout]):
    """A pending rollout written as is, without `rollout_create`'s checks; a test that needs
    one started goes through the services (the `running` fixture)."""

    class Meta:
        model = Rollout

    route = SubFactory(RouteFactory)
    baseline = SelfAttribute("route.baseline")
    candidate = SubFactory(DeploymentFactory, fleet=SelfAttribute("..route.baseline.fleet"))
    plan = LazyFunction(lambda: DEFAULT_PLAN.model_dump(mode="json"))
    gates = LazyFunction(lambda: SloGates().model_dump(mode="json"))


class RequestSampleFactory(DjangoModelFactory[RequestSample]):
    """A request as the samples consumer stores it: in the rollout's current step."""

    class Meta:
        model = RequestSample

    class Params:
        rollout: Rollout | None = None
        # Short requests (10 prompt and 20 output tokens) of one tenant, whose end-to-end
        # time follows from TTFT and TPOT and whose finish from the status.
        short = Trait(
            tenant="acme",
            prompt_tokens=10,
            output_tokens=20,
            e2e_ms=LazyAttribute(lambda s: s.ttft_ms + 20 * s.tpot_ms),
            finish=LazyAttribute(lambda s: "error" if s.status >= 500 else "stop"),
        )

    rid = LazyFunction(lambda: f"chatcmpl-{uuid.uuid4().hex}")
    ts = LazyFunction(timezone.now)
    rollout_id = LazyAttribute(lambda s: s.rollout.pk if s.rollout else None)
    step = LazyAttribute(lambda s: s.rollout.step_index if s.rollout else None)
    route = "chat"
    arm = "baseline"
    deployment = "x"
    tenant = "tenant-a"
    replica = "r0"  # the replica that served it: with `ts`, what the judge clusters by
    status = 200
    finish = "stop"
    prompt_tokens = 100
    output_tokens = 50
    ttft_ms = 50.0
    tpot_ms = 5.0
    e2e_ms = 300.0
