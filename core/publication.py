"""Telling the gateways that their configuration changed: the one call every write makes.

The gateway snapshot is built from every app's rows, so its publisher lives in the layer above
them all (`orchestration.gateway_snapshot`), which registers it here when Django starts
(`orchestration.apps`). The apps below call `gateway_snapshot_changed()` inside the transaction
that makes a change the gateways must see, and never import the publisher.
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

_publisher: Callable[[], object] | None = None


def register_gateway_snapshot_publisher(publish: Callable[[], object]) -> None:
    global _publisher
    _publisher = publish


def _publish() -> None:
    if _publisher is None:
        raise ImproperlyConfigured("no gateway snapshot publisher: is 'orchestration' installed?")
    _publisher()


def gateway_snapshot_changed() -> None:
    """Publishes the snapshot once the current transaction commits, or at once outside one (a
    beat task that measured saturation, costs or replica health writes in autocommit).

    Synchronous, in the process that made the change, not through the task queue: a key
    revocation or a rollback must reach the gateways within a second or two, also while the
    broker is slow or down. `robust`: a Redis outage must not fail the change that was committed;
    the beat task republishes every 30 s (and at once after Redis lost its data), which repairs a
    publication that failed.
    """
    transaction.on_commit(_publish, robust=True)
