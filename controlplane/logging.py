"""Structured JSON logs that carry the request id across the web process and Celery tasks."""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar
from typing import Any

from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

# The id of the HTTP request (or of the request that enqueued the running task). A ContextVar
# rather than a thread-local so that it also holds in async code.
request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)
task_var: ContextVar[tuple[str, str] | None] = ContextVar("celery_task", default=None)

# Ids are echoed into logs and headers, so accept only short, plain tokens from clients.
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def clean_request_id(candidate: str | None) -> str:
    """Reuse a caller's request id when it is well-formed, otherwise mint a new one."""
    if candidate and _VALID_REQUEST_ID.match(candidate):
        return candidate
    return uuid.uuid4().hex


class ContextFilter(logging.Filter):
    """Stamps every record with the current request id and Celery task, if any."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        task = task_var.get()
        if task is not None:
            # Set only inside a task: the JSON formatter writes every extra attribute it finds.
            record.task_id, record.task_name = task
        return True


class JsonFormatter(_BaseJsonFormatter):
    """One JSON object per line: time, level, logger, message, request id and any `extra`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("fmt", "%(levelname)s %(name)s %(message)s %(request_id)s")
        kwargs.setdefault("rename_fields", {"levelname": "level", "name": "logger"})
        kwargs.setdefault("timestamp", "time")  # ISO 8601 in UTC
        super().__init__(*args, **kwargs)


class RoutineBeatFilter(logging.Filter):
    """Drops beat's "Sending due task" line: with ticks every second or two it would be most of
    the log, and each task's outcome is counted in /metrics anyway."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Scheduler: Sending due task")
