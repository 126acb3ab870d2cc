from __future__ import annotations

from typing import Any

from factory.declarations import LazyAttribute, Sequence
from factory.django import DjangoModelFactory
from factory.helpers import post_generation

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
