"""The gateway's metrics name every tenant: they are served on a listener of their own, never on
the port tenants use, and one scrape covers every worker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.settings import Settings, SettingsError
from tests.conftest import ROOT, free_port
from tests.gateway.conftest import (
    ACME_KEY,
    GatewayLauncher,
    auth,
    chat_body,
    make_snapshot,
    publish,
    wait_for_version,
)
from tests.simfleet.harness import Fleet, request, wait_until


def requests_counted(metrics_url: str, **labels: str) -> float:
    text = request("GET", f"{metrics_url}/metrics").body.decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "tollgate_gateway_requests_total"
        and labels.items() <= sample.labels.items()
    )


def chat(url: str) -> int:
    import http.client
    from urllib.parse import urlsplit

    import orjson

    parts = urlsplit(url)
    # A connection each, so that with several workers the kernel spreads them.
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=orjson.dumps(chat_body()),
            headers={"content-type": "application/json", **auth(ACME_KEY)},
        )
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_metrics_are_served_on_their_own_listener_and_the_tenant_port_answers_404(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(fleet.urls[:1])
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    assert chat(gateway.url) == 200

    tenant_side = request("GET", f"{gateway.url}/metrics")
    assert tenant_side.status == 404
    assert b"acme" not in tenant_side.body
    assert tenant_side.json()["error"]["code"] == "not_found"
    assert requests_counted(gateway.metrics_url, tenant="acme", status="200") == 1


def test_one_scrape_counts_the_requests_of_every_worker(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    gateway = gateways.start(redis_url=redis_url, workers=2)
    snapshot = make_snapshot(fleet.urls[:2])
    publish(redis_url, snapshot)
    # Both workers must hold the snapshot: each /readyz is answered by one or the other.
    wait_until(lambda: all(gateway.version() == snapshot.version for _ in range(10)))
    statuses = [chat(gateway.url) for _ in range(40)]
    assert statuses.count(200) == 40
    assert requests_counted(gateway.metrics_url, tenant="acme") == 40


def test_the_metrics_listener_is_local_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GATEWAY_PORT", "GATEWAY_METRICS_PORT", "GATEWAY_METRICS_HOST"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings.from_env()
    assert (settings.metrics_host, settings.metrics_port) == ("127.0.0.1", 8081)
    monkeypatch.setenv("GATEWAY_METRICS_HOST", "10.0.0.7")
    monkeypatch.setenv("GATEWAY_METRICS_PORT", "9400")
    settings = Settings.from_env()
    assert (settings.metrics_host, settings.metrics_port) == ("10.0.0.7", 9400)
    monkeypatch.setenv("GATEWAY_METRICS_PORT", "8080")
    with pytest.raises(SettingsError, match="GATEWAY_METRICS_PORT"):
        Settings.from_env()


def test_a_taken_metrics_port_stops_the_gateway_with_one_line_that_names_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "GATEWAY_PORT": str(free_port()), "GATEWAY_METRICS_PORT": str(port)}
        done = subprocess.run(
            [sys.executable, "-m", "gateway"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    assert done.returncode == 2
    assert f"GATEWAY_METRICS_PORT: cannot listen on 127.0.0.1:{port}" in done.stderr
