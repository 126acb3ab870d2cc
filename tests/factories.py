from __future__ import annotations

import hashlib
from typing import Any

from factory.declarations import LazyAttribute, Sequence, SubFactory
from factory.django import DjangoModelFactory
from factory.helpers import post_generation

from registry.choices import ArtifactFormat, EvalSource, Relation
from registry.models import EvalRun, EvalScore, LineageEdge, ModelArtifact, PromotionGate
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
