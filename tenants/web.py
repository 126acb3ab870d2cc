"""What the HTML views share: the request type of a signed-in page, whether htmx asked for a
fragment, the release-manager check, and how a domain error becomes a 404 or a 403.

The DRF views have their own mapping (core/api.py): this one is for pages.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.core.exceptions import PermissionDenied as Forbidden
from django.http import Http404

from core.errors import NotFound, PermissionDenied
from core.http import HtmxHttpRequest
from tenants.models import User


class SignedInRequest(HtmxHttpRequest):
    """The request of a view behind `login_required`, whose user is therefore a `User`.

    Only the type checker reads this: the decorator is what makes it true, so a view typed with it
    must be behind `login_required`.
    """

    user: User


def wants_fragment(request: HtmxHttpRequest) -> bool:
    """Whether to answer with the fragment htmx swaps rather than the whole page."""
    # A history restore (back button after htmx's cache is gone) needs the whole page.
    return bool(request.htmx) and not request.htmx.history_restore_request


def release_manager(request: SignedInRequest, *, to: str) -> User:
    """The user, if a release manager; otherwise a 403 (`to` says what only they may do)."""
    if not request.user.is_release_manager:
        raise Forbidden(f"only release managers may {to}")
    return request.user


@contextmanager
def domain_errors_as_http() -> Iterator[None]:
    """A `NotFound` raised inside is a 404 and a `PermissionDenied` a 403, with its message;
    any other domain error passes on for the view to show."""
    try:
        yield
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    except PermissionDenied as exc:
        raise Forbidden(str(exc)) from exc
