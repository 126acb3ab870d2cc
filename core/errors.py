"""Domain exceptions that services raise and every interface (API, UI, CLI) maps to a 4xx."""

from __future__ import annotations


class DomainError(Exception):
    """A request that cannot be carried out as asked; the message tells the person what to fix."""

    status_code = 400


class NotFound(DomainError):
    status_code = 404


class PermissionDenied(DomainError):
    status_code = 403


class Conflict(DomainError):
    """The request contradicts what is already recorded (a duplicate, a stale state)."""

    status_code = 409
