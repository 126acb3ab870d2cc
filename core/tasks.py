"""Starting a Celery task from an app: by its stable name, once the transaction commits.

The tasks live in `workers/`, above every app; an app names the task instead of importing it.
"""

from __future__ import annotations

from celery import current_app
from django.db import transaction


def task_enqueue_after_commit(
    name: str, *, countdown: float | None = None, **kwargs: int | str
) -> None:
    """`robust`: a broker that does not answer must not fail a change already committed; the
    failure is logged (with the task's name) and the task is not sent."""
    transaction.on_commit(
        lambda: current_app.send_task(name, kwargs=kwargs, countdown=countdown), robust=True
    )
