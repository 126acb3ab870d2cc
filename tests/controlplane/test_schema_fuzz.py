"""The API against its own OpenAPI schema, fuzzed by schemathesis: for every operation, requests
drawn from the schema (valid and not), sent with a release manager's token holding every scope,
must never get a 5xx, and every answer whose status the schema documents must match it.

The requests go to the Django application in this process (WSGI), on the test database, where
`world` put one of each thing a path can name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
)
from schemathesis.core.result import Ok

# Enough draws per operation to reach its bad inputs; the whole run stays near a couple of minutes.
EXAMPLES = 15
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]


@pytest.fixture
def connection_kept() -> Iterator[None]:
    """As Django's test client does: a request's start and end must not close the connection that
    holds the test's transaction."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


def test_no_operation_answers_a_5xx_or_off_its_schema(
    world: dict[str, str], token: str, connection_kept: None
) -> None:
    schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), (
            f"the schema has an operation schemathesis cannot read: {result}"
        )
        operations.append(result.ok())
    assert len(operations) >= 50, "the schema lost operations"
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate],
        )
        def fuzz(case: Any) -> None:
            case.call_and_validate(headers=headers, checks=CHECKS)

        try:
            fuzz()
        except (Exception, BaseExceptionGroup) as failure:  # noqa: BLE001 -- collected
            failures.append(f"{operation.label}: {str(failure)[:1500]}")
    assert failures == [], "\n\n".join(failures)
