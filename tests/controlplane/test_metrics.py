from collections.abc import Callable

from django.test import Client
from prometheus_api_client import PrometheusConnect
from prometheus_client.parser import text_string_to_metric_families
from pytest_django.live_server_helper import LiveServer

from tests.conftest import wait_for


def sample_value(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def test_metrics_count_requests_by_route_pattern_not_path(client: Client, db: None) -> None:
    before = sample_value(
        client.get("/metrics").content.decode(),
        "tollgate_http_requests_total",
        route="/login/",
        status="200",
    )
    client.get("/login/")
    client.get("/login/?next=/anything/123")
    text = client.get("/metrics").content.decode()
    after = sample_value(text, "tollgate_http_requests_total", route="/login/", status="200")
    assert after == (before or 0) + 2
    assert sample_value(text, "tollgate_http_request_duration_seconds_count", route="/login/")
    assert "/anything/123" not in text


def test_unmatched_paths_share_one_label(client: Client, db: None) -> None:
    client.get("/no/such/page/42")
    text = client.get("/metrics").content.decode()
    assert sample_value(text, "tollgate_http_requests_total", route="<unmatched>", status="404")
    assert "/no/such/page/42" not in text


def test_prometheus_scrapes_the_control_plane(
    live_server: LiveServer, transactional_db: None, prometheus_factory: Callable[[list[str]], str]
) -> None:
    import urllib.request

    target = live_server.url.removeprefix("http://")
    prometheus = PrometheusConnect(url=prometheus_factory([target]), disable_ssl=True)
    with urllib.request.urlopen(f"{live_server.url}/login/") as response:  # noqa: S310
        assert response.status == 200

    query = 'sum(tollgate_http_requests_total{job="tollgate-web", route="/login/"})'

    def scraped() -> bool:
        result = prometheus.custom_query(query)
        return bool(result) and float(result[0]["value"][1]) >= 1

    wait_for(scraped, seconds=30)
