"""A request that finds Postgres or Redis away is a 503 with Retry-After, never a 500: the caller
(a CI pipeline polling a rollout) may retry it, and the CLI does."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
import redis
from django.db import ProgrammingError, connection
from django.http import HttpResponse
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from controlplane.middleware import DependencyUnavailableMiddleware
from tenants.models import User
from tests.conftest import free_port


@pytest.fixture
def database_away(transactional_db: None) -> Iterator[Callable[[], None]]:
    """Call it to point the connection at a port nothing listens on (the server went away); the
    real address is back after the test."""
    real = dict(connection.settings_dict)

    def go_away() -> None:
        connection.close()
        connection.settings_dict["HOST"] = "127.0.0.1"
        connection.settings_dict["PORT"] = str(free_port())

    yield go_away
    connection.close()
    connection.settings_dict.update(real)


def test_an_api_read_without_its_database_is_a_503_with_retry_after(
    api_client: APIClient, ci_token: str, database_away: Callable[[], None]
) -> None:
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {ci_token}")
    assert api_client.get("/api/v1/rollouts").status_code == 200
    database_away()

    response = api_client.get("/api/v1/rollouts/1")

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json() == {
        "detail": "the database is unavailable for the moment; retry in a few seconds"
    }


def test_a_page_without_its_database_is_a_503(
    client: Client, release_manager: User, database_away: Callable[[], None]
) -> None:
    client.force_login(release_manager)
    assert client.get("/rollouts/").status_code == 200
    database_away()

    response = client.get("/rollouts/")

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert b"the database is unavailable" in response.content


def test_redis_away_is_a_503_and_other_errors_stay_500s(rf: RequestFactory) -> None:
    # No view lets a Redis failure through today (the dashboards' gauges degrade to "unknown"):
    # the middleware's mapping is checked as it is called.
    middleware = DependencyUnavailableMiddleware(lambda request: HttpResponse())
    request = rf.get("/api/v1/tenants/acme")

    response = middleware.process_exception(request, redis.ConnectionError("Connection refused"))

    assert response is not None
    assert response.status_code == 503
    assert json.loads(response.content)["detail"].startswith("Redis is unavailable")
    assert middleware.process_exception(request, ValueError("a bug")) is None
    assert middleware.process_exception(request, ProgrammingError("a bug in SQL")) is None
