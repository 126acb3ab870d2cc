"""`Idempotency-Key` for every API write: a retry gets the first answer, and nothing runs twice.

A pipeline that times out on `POST /api/v1/rollouts` cannot tell whether the rollout started; it
retries with the same `Idempotency-Key` header and must not start a second one. So a POST, PUT or
PATCH under /api/ that carries the header runs inside one transaction with the record of its
answer:

1. insert (caller, key) with a hash of the request. A concurrent retry's insert waits on the
   unique index until the first request's transaction ends;
2. run the view; its writes and the stored answer (status and body) commit together, so a crash
   in between leaves neither and the retry runs the request afresh;
3. a later request with the key finds the row: the same request gets the stored answer back (with
   `Idempotent-Replayed: true`), another request under the same key is a 422.

An answer that holds a secret (`Cache-Control: no-store`: a new token or key) is kept as a 409
saying so, never with the secret. An answer of 5xx, 401 or 403 is not kept: its transaction
rolls back, and a retry runs again. Records are kept `TTL` (a day) and pruned by the beat; an
older one no longer counts.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from core.models import IdempotencyRecord

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
TTL = dt.timedelta(hours=24)
MAX_KEY_LENGTH = 255
WRITES = frozenset({"POST", "PUT", "PATCH"})
_SECRET_NOT_KEPT = (
    f"the first request with this {HEADER} succeeded ({{}}); its answer held a secret, which "
    "Tollgate does not keep: list your tokens or keys to find it, and revoke it if it is lost"
)


def caller_of(request: HttpRequest) -> str | None:
    """Whose key this is: the bearer token's hash, or the signed-in user; None for nobody."""
    authorization = request.headers.get("Authorization", "")
    if authorization:
        return hashlib.sha256(authorization.encode()).hexdigest()
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return None


def request_hash(request: HttpRequest) -> str:
    digest = hashlib.sha256()
    for part in (request.method or "", request.get_full_path()):
        digest.update(part.encode() + b"\0")
    digest.update(request.body)
    return digest.hexdigest()


def key_problem(key: str) -> str | None:
    if not key or len(key) > MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        return (
            f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable ASCII characters, e.g. a UUID "
            "made once per operation and sent again with each retry of it"
        )
    return None


_inside = ContextVar("inside_idempotent_request", default=False)


def inside_idempotent_request() -> bool:
    """Whether this code runs in an API write's idempotency transaction: what would hold locks
    over network calls should wait for its commit."""
    return _inside.get()


def answer_once(
    request: HttpRequest, key: str, caller: str, respond: Callable[[HttpRequest], HttpResponse]
) -> HttpResponse:
    """The answer to `request` under `key`: the stored one, or `respond`'s, stored."""
    fingerprint = request_hash(request)
    with transaction.atomic():
        IdempotencyRecord.objects.filter(
            caller=caller, key=key, created_at__lt=timezone.now() - TTL
        ).delete()
        try:
            with transaction.atomic():
                record = IdempotencyRecord.objects.create(
                    caller=caller, key=key, request_hash=fingerprint, status=0, body=b""
                )
        except IntegrityError:
            # Another request with this key committed first (we waited for it on the index).
            return _stored(caller, key, fingerprint)
        inside = _inside.set(True)
        try:
            response = respond(request)
        finally:
            _inside.reset(inside)
        # Not kept: a failure (a retry runs again) and a refused caller (its token may be fixed).
        if response.status_code >= 500 or response.status_code in (401, 403) or response.streaming:
            transaction.set_rollback(True)
            return response
        record.status = response.status_code
        record.content_type = response.get("Content-Type", "")
        record.body = response.content
        if "no-store" in response.get("Cache-Control", ""):
            # The answer holds a secret (a new token or key), which is never kept at rest: a
            # retry learns that the first request succeeded, not the secret.
            record.status, record.content_type = 409, "application/json"
            record.body = json.dumps(
                {"detail": _SECRET_NOT_KEPT.format(response.status_code)}
            ).encode()
        record.save(update_fields=["status", "content_type", "body"])
        return response


def _stored(caller: str, key: str, fingerprint: str) -> HttpResponse:
    record = IdempotencyRecord.objects.get(caller=caller, key=key)
    if record.request_hash != fingerprint:
        return JsonResponse(
            {
                "detail": f"{HEADER} {key!r} was first used for another request (another path, "
                "method or body); make a new key for a new operation"
            },
            status=422,
        )
    response = HttpResponse(
        bytes(record.body), status=record.status, content_type=record.content_type or None
    )
    response[REPLAYED_HEADER] = "true"
    return response


def prune() -> int:
    """Deletes the records older than `TTL`; returns how many."""
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=timezone.now() - TTL).delete()
    return deleted


def document_header(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """An OpenAPI postprocessing hook: names the header on every write of the schema."""
    parameter = {
        "in": "header",
        "name": HEADER,
        "required": False,
        "schema": {"type": "string", "maxLength": MAX_KEY_LENGTH},
        "description": "Makes a retry safe: a second request with the same key (and the same "
        "body) gets the first answer back and changes nothing; kept 24 h.",
    }
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if method.upper() in WRITES:
                operation.setdefault("parameters", []).append(parameter)
    return result
