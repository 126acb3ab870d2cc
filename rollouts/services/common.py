"""What the rollouts app's writes share: the release-manager check, `full_clean` as one message a
person can act on, and the gateway publication after commit."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from core.errors import DomainError, PermissionDenied
from tenants.models import User


def require_release_manager(actor: User | None, what: str) -> User:
    if actor is None or not actor.is_release_manager:
        raise PermissionDenied(f"only release managers may {what}")
    return actor


def full_clean_or_raise(row: models.Model) -> None:
    """full_clean, its errors turned into one message a person can act on."""
    try:
        # Uniqueness is checked by the callers under their lock, and answered as a conflict.
        row.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise DomainError(
            "; ".join(f"{field}: {' '.join(errors)}" for field, errors in exc.message_dict.items())
        ) from exc
