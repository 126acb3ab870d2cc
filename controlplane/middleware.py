"""Request id propagation, request metrics and input guards for every HTTP request to the
control plane."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from urllib.parse import unquote_plus

import redis
from django.db import Error as DatabaseError
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

from controlplane import metrics
from controlplane.health import describe_error
from controlplane.logging import clean_request_id, request_id_var
from core import idempotency

logger = logging.getLogger("tollgate.http")

REQUEST_ID_HEADER = "X-Request-ID"


class RequestIdMiddleware:
    """Adopts the caller's X-Request-ID (or mints one) for logs, Celery tasks and the response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = clean_request_id(request.headers.get(REQUEST_ID_HEADER))
        token = request_id_var.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response[REQUEST_ID_HEADER] = request_id
        return response


def _route_label(request: HttpRequest) -> str:
    # The URL pattern, not the path: paths carry ids and would explode the label cardinality.
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "<unmatched>"
    return "/" + match.route if match.route else (match.view_name or "<unnamed>")


# Scrapes and liveness probes arrive every few seconds; counting or logging them at INFO would
# drown the requests people make.
_PROBE_ROUTES = frozenset({"/metrics", "/healthz"})


class RequestMetricsMiddleware:
    """Counts and times requests by route pattern, and writes one access log line each."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed = time.perf_counter() - started
        route = _route_label(request)
        quiet = route in _PROBE_ROUTES
        if not quiet:
            metrics.observe_http_request(request.method or "", route, response.status_code, elapsed)
        logger.log(
            logging.DEBUG if quiet else logging.INFO,
            "request",
            extra={
                "method": request.method,
                "path": request.path,
                "route": route,
                "status": response.status_code,
                "duration_ms": round(elapsed * 1000, 2),
            },
        )
        return response


class RejectNulMiddleware:
    """A NUL character in the path or the query string is a 400 for every view, page or API.

    Postgres stores and compares no NUL in text, so one that reached a lookup or a search
    (`?search=a%00b`, a route name in the path) would be a 500 from the database driver; no view
    has a use for one. Bodies are checked by the API's parsers (core/parsers.py) and by
    the form fields, which refuse NUL characters already.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        query = unquote_plus(request.META.get("QUERY_STRING", ""))
        if "\x00" in request.path or "\x00" in query:
            return JsonResponse(
                {"detail": "the path or query string holds a NUL character (%00); remove it"},
                status=400,
            )
        return self.get_response(request)


# What a dependency that is away, overloaded or restarting raises: the connection failed or timed
# out, the server closed it, a statement was cancelled or lost a deadlock. The request may succeed
# if sent again, so it is a 503 that says when to retry (the CLI retries 503s by itself), not a
# 500 that reads as a bug; anything else a driver raises is a bug and stays a 500.
UNAVAILABLE = (OperationalError, InterfaceError, redis.ConnectionError, redis.TimeoutError)
RETRY_AFTER_S = 5


class DependencyUnavailableMiddleware:
    """A view that failed because Postgres or Redis is away answers 503 with Retry-After."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not isinstance(exc, UNAVAILABLE):
            return None
        what = "the database" if isinstance(exc, DatabaseError) else "Redis"
        logger.warning(
            "dependency unavailable",
            extra={"path": request.path, "dependency": what, "error": describe_error(exc)},
        )
        detail = f"{what} is unavailable for the moment; retry in a few seconds"
        if request.path.startswith("/api/"):
            response: HttpResponse = JsonResponse({"detail": detail}, status=503)
        else:
            response = HttpResponse(detail, status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response


class IdempotencyMiddleware:
    """Routes API writes that carry an `Idempotency-Key` through `core.idempotency`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        key = request.headers.get(idempotency.HEADER)
        if key is None or request.method not in idempotency.WRITES:
            return self.get_response(request)
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        problem = idempotency.key_problem(key)
        if problem:
            return JsonResponse({"detail": problem}, status=400)
        caller = idempotency.caller_of(request)
        if caller is None:  # nobody to keep it for: the view answers 401
            return self.get_response(request)
        return idempotency.answer_once(request, key, caller, self.get_response)
