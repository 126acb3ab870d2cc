"""DRF permission classes: API token scopes on top of the user's role."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from tenants.models import ApiToken


class TokenHasScopes(BasePermission):
    """Requires every scope in the view's `required_scopes` when the caller uses an API token.

    Session users (the web UI) are governed by their role alone; a token is a narrower grant of
    its owner's role, never a wider one.
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        if not isinstance(request.auth, ApiToken):
            return True
        by_method = getattr(view, "required_scopes_by_method", None)
        method = request.method or ""
        answers = hasattr(view, method.lower())  # otherwise the view answers 405
        if by_method is not None and answers and method not in by_method and method != "OPTIONS":
            # A method the view names no scope for is refused, not let through: a new method
            # added without its scope must fail closed.
            self.message = f"No API token scope allows {method} here."
            return False
        if by_method is not None:
            required = set(by_method.get(method, ()))
        else:
            required = set(getattr(view, "required_scopes", ()))
        missing = required - set(request.auth.scopes)
        if missing:
            self.message = "This API token lacks the scope(s): " + ", ".join(sorted(missing))
            return False
        return True


class ReleaseManagerWrites(BasePermission):
    """Everyone signed in may read; only release managers (and their tokens) may write."""

    message = "Only release managers may change this."

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return bool(getattr(request.user, "is_release_manager", False))
