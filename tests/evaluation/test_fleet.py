"""Fleet signals beside the verdict, read from a real Prometheus scraping simulated replicas."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.utils import timezone
from pytest_django.fixtures import Settings

from evaluation.fleet import fleet_signals
from rollouts.engine_gauges import instance
from tests.conftest import wait_for
from tests.simfleet.harness import Fleet as SimFleet
from tests.simfleet.harness import FleetLauncher, model


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimFleet]:
    launcher = FleetLauncher(tmp_path)
    yield launcher.start([model()], replicas=1)
    launcher.stop_all()


def test_signals_come_from_prometheus_and_are_unavailable_when_it_is_away(
    sim: SimFleet, prometheus_factory: Callable[[list[str]], str], settings: Settings
) -> None:
    settings.PROMETHEUS_URL = prometheus_factory([u.removeprefix("http://") for u in sim.urls])
    replicas = {instance(sim.urls[0])}

    def scraped() -> bool:
        now = timezone.now()
        signals = fleet_signals(replicas, now - dt.timedelta(seconds=30), now)
        return signals.available and signals.latest("kv_cache_usage") is not None

    wait_for(scraped, seconds=30)
    now = timezone.now()
    signals = fleet_signals(replicas, now - dt.timedelta(seconds=30), now)
    assert signals.latest("waiting_requests") == 0
    assert 0 <= (signals.latest("kv_cache_usage") or 0) <= 1
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    assert not fleet_signals(replicas, now - dt.timedelta(seconds=30), now).available
