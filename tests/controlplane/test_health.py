import subprocess
from collections.abc import Callable

from django.test import Client
from pytest_django.fixtures import Settings

from tests.conftest import free_port


def test_healthz_answers_without_touching_dependencies(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_green_when_every_dependency_answers(
    client: Client, db: None, settings: Settings, prometheus_url: str
) -> None:
    settings.PROMETHEUS_URL = prometheus_url
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "ok"
    assert {name: check["status"] for name, check in body["checks"].items()} == {
        "database": "ok",
        "redis": "ok",
        "prometheus": "ok",
    }


def test_readyz_names_redis_when_it_stops_and_the_process_keeps_serving(
    client: Client,
    db: None,
    settings: Settings,
    prometheus_url: str,
    redis_server: tuple[str, subprocess.Popen[bytes]],
    use_redis_url: Callable[[str], None],
) -> None:
    settings.PROMETHEUS_URL = prometheus_url
    url, process = redis_server
    use_redis_url(url)
    assert client.get("/readyz").status_code == 200

    process.terminate()
    process.wait(timeout=10)

    response = client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["redis"]["status"] == "error"
    assert "Connection" in checks["redis"]["error"]
    assert checks["database"]["status"] == "ok"
    assert checks["prometheus"]["status"] == "ok"
    assert client.get("/healthz").status_code == 200


def test_readyz_names_prometheus_when_it_is_unreachable(
    client: Client, db: None, settings: Settings
) -> None:
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    response = client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["prometheus"]["status"] == "error"
    assert checks["redis"]["status"] == "ok"
