"""Client disconnects, replica failures, Redis outages, and the split seen end to end."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time

import aiohttp
import orjson
import pytest

from gateway.snapshot import Budget
from tests.gateway.conftest import (
    ACME_KEY,
    GLOBEX_KEY,
    QA_KEY,
    GatewayLauncher,
    auth,
    chat_body,
    make_snapshot,
    publish,
    records,
    wait_for_version,
)
from tests.simfleet.harness import Fleet, FleetLauncher, metric, model, request, wait_until

SLOW = {"step_base_ms": 20, "decode_per_seq_ms": 0, "prefill_per_token_ms": 0}


def post(url: str, body: dict[str, object], key: str = ACME_KEY, **headers: str) -> int:
    """Status of one chat completion through the gateway (plain HTTP)."""
    import http.client
    from urllib.parse import urlsplit

    import orjson

    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=orjson.dumps(body),
            headers={"content-type": "application/json", **auth(key), **headers},
        )
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_leaves_stops_the_generation_within_a_second(
    gateways: GatewayLauncher, fleets: FleetLauncher, redis_url: str, stream: bool
) -> None:
    slow = fleets.start([model(speed=SLOW)])
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(slow.urls)
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)

    async def read_everything(session: aiohttp.ClientSession) -> None:
        body = chat_body(max_tokens=1000, stream=stream, ignore_eos=True)
        url = gateway.url + "/v1/chat/completions"
        async with session.post(url, json=body, headers=auth(ACME_KEY)) as response:
            await response.read()

    async def start_then_leave() -> None:
        async with aiohttp.ClientSession() as session:
            # Leave about 25 tokens into the answer.
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(read_everything(session), timeout=0.5)

    asyncio.run(start_then_leave())
    took = wait_until(lambda: metric(slow.url, "vllm:num_requests_running") == 0, seconds=2)
    assert took < 1.0
    generated = metric(slow.url, "vllm:generation_tokens_total")
    assert 0 < generated < 100


def test_a_dead_replica_is_retried_on_another_before_any_byte(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    from tests.conftest import free_port

    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot([dead, fleet.urls[0]])
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    assert [post(gateway.url, chat_body()) for _ in range(10)] == [200] * 10


def test_every_replica_down_is_a_502_that_says_so(
    gateways: GatewayLauncher, redis_url: str
) -> None:
    from tests.conftest import free_port

    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot([f"http://127.0.0.1:{free_port()}"])
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    assert post(gateway.url, chat_body()) == 502


def test_a_qa_key_can_force_the_canary_and_others_cannot(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(fleet.urls[:1], fleet.urls[2:], canary_weight=0)
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    before = metric(fleet.urls[2], "vllm:request_success_total")
    assert post(gateway.url, chat_body(), key=QA_KEY, **{"X-Tollgate-Arm": "canary"}) == 200
    wait_until(lambda: metric(fleet.urls[2], "vllm:request_success_total") == before + 1)
    assert post(gateway.url, chat_body(), key=ACME_KEY, **{"X-Tollgate-Arm": "canary"}) == 403
    assert post(gateway.url, chat_body(), key=QA_KEY, **{"X-Tollgate-Arm": "blue"}) == 400


def test_with_redis_gone_routing_goes_on_and_budgets_follow_the_fail_mode(
    gateways: GatewayLauncher,
    fleet: Fleet,
    redis_server: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, server = redis_server
    gateway = gateways.start(redis_url=url)
    # acme fails closed, globex fails open; acme has a budget, globex none.
    snapshot = make_snapshot(fleet.urls[:2], acme_budget=Budget(requests_per_minute=1000))
    publish(url, snapshot)
    wait_for_version(gateway, snapshot.version)
    assert post(gateway.url, chat_body(), key=ACME_KEY) == 200

    server.terminate()
    server.wait(timeout=10)

    assert post(gateway.url, chat_body(), key=GLOBEX_KEY) == 200  # last snapshot, fail open
    assert post(gateway.url, chat_body(), key=ACME_KEY) == 503  # fail closed
    ready = request("GET", f"{gateway.url}/readyz").json()
    wait_until(lambda: request("GET", f"{gateway.url}/readyz").json()["redis"] == "error")
    assert ready["snapshot_version"] == snapshot.version


def test_a_new_snapshot_applies_without_a_restart(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    gateway = gateways.start(redis_url=redis_url)
    first = make_snapshot(fleet.urls[:1])
    publish(redis_url, first)
    wait_for_version(gateway, first.version)
    assert post(gateway.url, chat_body()) == 200
    second = make_snapshot(fleet.urls[:1], acme_budget=Budget(requests_per_minute=0))
    publish(redis_url, second)
    wait_for_version(gateway, second.version)
    assert post(gateway.url, chat_body()) == 429


@pytest.mark.parametrize("stream", [False, True], ids=["non-streaming", "streaming"])
def test_a_replica_that_dies_mid_answer_is_a_clear_error_and_still_charged(
    gateways: GatewayLauncher, fleets: FleetLauncher, redis_url: str, stream: bool
) -> None:
    doomed = fleets.start([model(speed=SLOW)])
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(doomed.urls)
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)

    async def ask(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        body = chat_body(max_tokens=1000, stream=stream, ignore_eos=True)
        url = gateway.url + "/v1/chat/completions"
        async with session.post(url, json=body, headers=auth(ACME_KEY)) as response:
            return response.status, await response.read()

    async def ask_while_the_replica_dies() -> tuple[int, bytes]:
        async with aiohttp.ClientSession() as session:
            answer = asyncio.ensure_future(ask(session))
            await asyncio.sleep(0.4)  # about 20 tokens in
            doomed.process.kill()
            return await asyncio.wait_for(answer, 10)

    status, body = asyncio.run(ask_while_the_replica_dies())
    doomed.process.wait(timeout=10)

    if stream:
        # The status line went out with the first token: the stream ends with an error event.
        assert status == 200
        events = [e for e in body.split(b"\n\n") if e.startswith(b"data: ")]
        assert events[-1] == b"data: [DONE]"
        assert orjson.loads(events[-2][6:])["error"]["code"] == "upstream_failed"
    else:
        assert status == 502
        assert orjson.loads(body)["error"]["code"] == "upstream_failed"
    assert request("GET", f"{gateway.url}/healthz").status == 200
    record = records(redis_url, 1)[0]
    assert record["finish"] == "error"
    assert record["ot"] > 0  # what was generated before the crash is charged


def test_a_redis_stall_during_admission_does_not_hold_the_tenants_concurrency_slot(
    gateways: GatewayLauncher,
    fleet: Fleet,
    redis_server: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, server = redis_server
    # One request at a time: a slot held by a lost admission would lock the tenant out.
    snapshot = make_snapshot(fleet.urls[:1], acme_budget=Budget(max_concurrent_requests=1))
    gateway = gateways.start(redis_url=url)
    publish(url, snapshot)
    wait_for_version(gateway, snapshot.version)
    server.send_signal(signal.SIGSTOP)  # the admission is sent, and waits in the socket
    try:
        # The gateway gives up after its 1 s Redis timeout; acme fails closed.
        assert post(gateway.url, chat_body(), key=ACME_KEY) == 503
    finally:
        server.send_signal(signal.SIGCONT)
    # Whether the admission ran or went with the dropped connection, the refused request is
    # settled (with nothing) once Redis answers: the slot is free within seconds, not at the
    # reservation's deadline (the total timeout plus a minute).
    deadline = time.monotonic() + 10
    while post(gateway.url, chat_body(), key=ACME_KEY) != 200:
        assert time.monotonic() < deadline, "the tenant stayed locked out"
        time.sleep(0.2)
