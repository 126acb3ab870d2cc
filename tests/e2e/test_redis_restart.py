"""A Redis without persistence restarts under a running control plane: the Celery worker's beat
gives it a snapshot and the budget counters back, and a key revoked afterwards stops at once."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings

from gateway.budget_keys import day_key
from gateway.snapshot import SNAPSHOT_KEY, Snapshot
from orchestration.gateway_snapshot import publish_snapshot
from tenants.budget_counters import REBUILT_RUN_KEY
from tenants.models import UsageRollup
from tenants.services.accounts import tenant_create
from tenants.services.gateway_keys import api_key_create
from tests.conftest import ROOT, RedisServer
from tests.e2e.conftest import Worker
from tests.gateway.conftest import GatewayLauncher, wait_for_version
from tests.simfleet.harness import request, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    started = Worker(tmp_path / "worker.log")
    yield started
    started.stop()


def models_status(gateway_url: str, secret: str) -> int:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(gateway_url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=5)
    try:
        connection.request("GET", "/v1/models", headers={"Authorization": f"Bearer {secret}"})
        return connection.getresponse().status
    finally:
        connection.close()


def test_beat_republishes_and_rebuilds_after_a_restart_and_a_revocation_lands_within_2_s(
    tmp_path: Path,
    restartable_redis: RedisServer,
    use_redis_url: Callable[[str], None],
    worker: Worker,
) -> None:
    use_redis_url(restartable_redis.url)
    tenant = tenant_create(actor=None, slug="acme", name="Acme")
    key, secret = api_key_create(actor=None, tenant=tenant, name="app")
    UsageRollup.objects.create(
        tenant=tenant,
        granularity="day",
        bucket=time_today(),
        route="chat",
        arm="baseline",
        deployment="1",
        requests=1,
        tokens_in=700,
        tokens_out=77,
    )
    launcher = GatewayLauncher(tmp_path)
    try:
        gateway = launcher.start(redis_url=restartable_redis.url)
        for _ in range(4):
            version = publish_snapshot()
        assert version is not None
        wait_for_version(gateway, version)
        worker.start()
        client = redis.Redis.from_url(restartable_redis.url, decode_responses=True)
        wait_until(lambda: client.get(REBUILT_RUN_KEY) is not None, seconds=60, every=0.2)

        restartable_redis.restart()
        came_back = time.monotonic()
        wait_until(lambda: client.get(SNAPSHOT_KEY) is not None, seconds=15, every=0.1)
        republished_after = time.monotonic() - came_back
        snapshot = Snapshot.model_validate_json(client.get(SNAPSHOT_KEY) or "")
        wait_for_version(gateway, snapshot.version, seconds=5)
        wait_until(lambda: client.get(REBUILT_RUN_KEY) is not None, seconds=15, every=0.1)
        assert client.get(day_key(str(tenant.pk), time_today())) == "777"
        assert republished_after < 5.0, republished_after

        assert models_status(gateway.url, secret) == 200
        revoked = revoke_elsewhere(key.pk, restartable_redis.url)
        wait_until(lambda: models_status(gateway.url, secret) == 401, seconds=10)
        assert time.time() - revoked < 2.0
        assert request("GET", f"{gateway.url}/readyz").status == 200
    finally:
        launcher.stop_all()


def revoke_elsewhere(key_id: int, redis_url: str) -> float:
    """Revokes the key in a process of its own whose Celery broker is the restarted Redis, as the
    web server's would be; returns the (epoch) time the revocation was committed and enqueued."""
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": redis_url,
        "LOG_LEVEL": "WARNING",
    }
    script = (
        "import time; from tenants.services.gateway_keys import api_key_revoke; "
        f"api_key_revoke(actor=None, key_id={key_id}); print(time.time())"
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


def time_today() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
