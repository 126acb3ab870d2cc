"""DRF plumbing shared by every app's API: one exception handler for domain errors."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import DomainError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Keep DRF's `{"detail": …}` shape for domain errors and model validation errors."""
    if isinstance(exc, DomainError):
        return Response({"detail": str(exc)}, status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        detail: Any = exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        return Response({"detail": detail}, status=400)
    if isinstance(exc, RequestDataTooBig):
        # Django's own answer would be an HTML 400 page with no reason given.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response({"detail": f"the request body is larger than {limit} bytes"}, status=413)
    return drf_exception_handler(exc, context)
