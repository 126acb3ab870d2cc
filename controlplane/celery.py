"""The Celery application. Tasks live in `workers/` (see ../STYLE: thin, named, JSON-only)."""

from __future__ import annotations

import os
import time
from contextvars import Token
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("tollgate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"], related_name="tasks")

REQUEST_ID_HEADER = "request_id"


@signals.setup_logging.connect
def _keep_django_logging(**_: Any) -> None:
    """Django's LOGGING already configured JSON logs; Celery must not replace them."""


@signals.before_task_publish.connect
def _pass_request_id(headers: dict[str, Any] | None = None, **_: Any) -> None:
    from controlplane.logging import request_id_var

    request_id = request_id_var.get()
    if headers is not None and request_id and REQUEST_ID_HEADER not in headers:
        headers[REQUEST_ID_HEADER] = request_id


@dataclass(frozen=True)
class _RunningTask:
    started: float
    request_id_token: Token[str | None]
    task_token: Token[tuple[str, str] | None]


# A worker child runs one task at a time, but keying by task id keeps this right under the
# threads pool too.
_running: dict[str, _RunningTask] = {}


@signals.task_prerun.connect
def _task_started(task_id: str, task: Task[Any, Any], **_: Any) -> None:
    from controlplane.logging import clean_request_id, request_id_var, task_var

    # Custom message headers surface as attributes of the task's request context.
    request_id = clean_request_id(getattr(task.request, REQUEST_ID_HEADER, None))
    _running[task_id] = _RunningTask(
        started=time.perf_counter(),
        request_id_token=request_id_var.set(request_id),
        task_token=task_var.set((task_id, task.name)),
    )


@signals.task_postrun.connect
def _task_finished(task_id: str, task: Task[Any, Any], state: str | None = None, **_: Any) -> None:
    from controlplane import metrics
    from controlplane.logging import request_id_var, task_var

    running = _running.pop(task_id, None)
    seconds = time.perf_counter() - running.started if running is not None else None
    outcome = {"SUCCESS": "succeeded", "FAILURE": "failed", "RETRY": "retried"}.get(
        state or "", (state or "unknown").lower()
    )
    metrics.observe_celery_task(task.name, outcome, seconds)
    if running is not None:
        task_var.reset(running.task_token)
        request_id_var.reset(running.request_id_token)
