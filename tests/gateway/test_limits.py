"""Shedding at peak, deadlines, and the per-request limits of a tenant's budget."""

from __future__ import annotations

import asyncio
import http.client
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import redis

from gateway.requests import estimate_prompt_tokens
from gateway.snapshot import Budget, Deployment
from tests.gateway.conftest import (
    ACME_KEY,
    GLOBEX_KEY,
    ROUTE,
    GatewayLauncher,
    GatewayProcess,
    auth,
    chat_body,
    make_snapshot,
    publish,
    wait_for_version,
)
from tests.simfleet.harness import Fleet, FleetLauncher, model, request


def post(
    gateway: GatewayProcess,
    body: dict[str, object],
    key: str = ACME_KEY,
    path: str = "/v1/chat/completions",
) -> tuple[int, dict[str, object], dict[str, str]]:
    parts = urlsplit(gateway.url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20)
    try:
        connection.request(
            "POST",
            path,
            body=orjson.dumps(body),
            headers={"content-type": "application/json", **auth(key)},
        )
        response = connection.getresponse()
        return response.status, orjson.loads(response.read()), dict(response.getheaders())
    finally:
        connection.close()


def test_lower_tiers_are_shed_first_when_a_deployment_is_saturated(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(fleet.urls[:1])
    # The control plane saw the deployment's KV cache 97% full (over its 95% threshold).
    base = snapshot.deployments["base"]
    saturated = base.model_copy(update={"kv_cache_usage": 0.97})
    tenants = {
        "acme": snapshot.tenants["acme"].model_copy(update={"tier": "critical"}),
        "globex": snapshot.tenants["globex"].model_copy(update={"tier": "batch"}),
    }
    snapshot = snapshot.model_copy(update={"deployments": {"base": saturated}, "tenants": tenants})
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)

    status, body, headers = post(gateway, chat_body(), key=GLOBEX_KEY)
    assert status == 503
    assert headers["retry-after"] == "2"
    assert "batch-tier traffic is shed first" in str(body)
    assert post(gateway, chat_body(), key=ACME_KEY)[0] == 200  # the top tier still passes
    # The refusal is on the samples stream, with its reason, for usage accounting and the judge.
    records = [orjson.loads(f[b"r"]) for _, f in _stream(redis_url)]
    refused = [r for r in records if r["tenant"] == "globex"]
    assert len(refused) == 1
    assert refused[0] | {"rid": None, "ts": None, "e2e_ms": None, "pt": None, "conc": None} == {
        **refused[0], "rid": None, "ts": None, "e2e_ms": None, "pt": None, "conc": None,
        "status": 503, "finish": "rejected", "reason": "shed", "arm": "baseline", "ot": 0,
    }  # fmt: skip
    served = [r for r in records if r["tenant"] == "acme"]
    assert [(r["status"], r["reason"]) for r in served] == [(200, None)]
    # Both carry the estimate made before an arm was chosen, whatever the replica counted.
    estimate = estimate_prompt_tokens(chat_body(), chat=True)
    assert estimate > 0
    assert [r["pe"] for r in refused + served] == [estimate, estimate]


def _stream(redis_url: str) -> Any:
    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and client.xlen("tollgate:samples") < 2:
        time.sleep(0.05)
    return client.xrange("tollgate:samples")


def test_standard_tier_is_shed_only_past_the_headroom(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(fleet.urls[:1])
    tenants = {
        "acme": snapshot.tenants["acme"].model_copy(update={"tier": "standard"}),
        "globex": snapshot.tenants["globex"].model_copy(update={"tier": "batch"}),
    }
    deployment: Deployment = snapshot.deployments["base"].model_copy(
        update={"waiting_requests": 70, "max_waiting_requests": 64}
    )
    snapshot = snapshot.model_copy(update={"deployments": {"base": deployment}, "tenants": tenants})
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    assert post(gateway, chat_body(), key=GLOBEX_KEY)[0] == 503  # batch: at 1.0x
    assert post(gateway, chat_body(), key=ACME_KEY)[0] == 200  # standard: 1.09x < 1.25x


def test_a_model_that_never_answers_is_cut_at_the_first_token_deadline(
    gateways: GatewayLauncher, fleets: FleetLauncher, redis_url: str
) -> None:
    hung = fleets.start([model()], faults={"hang_rate": 1.0})
    gateway = gateways.start(redis_url=redis_url, GATEWAY_FIRST_TOKEN_TIMEOUT_S="0.5")
    snapshot = make_snapshot(hung.urls)
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    status, body, _ = post(gateway, chat_body())
    assert status == 504
    assert body["error"]["code"] == "first_token_timeout"  # type: ignore[index]
    # And the replica is told: the hung request no longer runs there.
    assert request("GET", f"{hung.url}/admin/state").json()["engines"]["tiny"]["running"] == 0


def test_max_output_tokens_clamps_or_rejects_as_the_tenant_chose(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(
        fleet.urls[:1],
        acme_budget=Budget(max_output_tokens=3, max_context_tokens=50),
    )
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    status, body, _ = post(gateway, chat_body(max_tokens=100, ignore_eos=True))
    assert status == 200
    assert body["usage"]["completion_tokens"] == 3  # type: ignore[index]
    long_prompt = chat_body(messages=[{"role": "user", "content": "word " * 400}])
    status, body, _ = post(gateway, long_prompt)
    assert status == 400
    assert body["error"]["code"] == "context_length_exceeded"  # type: ignore[index]


def test_the_concurrency_limit_refuses_the_request_over_it(
    gateways: GatewayLauncher, fleets: FleetLauncher, redis_url: str
) -> None:
    slow = fleets.start(
        [model(speed={"step_base_ms": 20, "decode_per_seq_ms": 0, "prefill_per_token_ms": 0})]
    )
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(slow.urls, acme_budget=Budget(max_concurrent_requests=2))
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)

    async def three_at_once() -> list[int]:
        async with aiohttp.ClientSession() as session:

            async def one() -> int:
                body = chat_body(max_tokens=20, ignore_eos=True)
                url = gateway.url + "/v1/chat/completions"
                async with session.post(url, json=body, headers=auth(ACME_KEY)) as response:
                    await response.read()
                    return response.status

            return list(await asyncio.gather(one(), one(), one()))

    assert sorted(asyncio.run(three_at_once())) == [200, 200, 429]


def test_sigterm_lets_a_running_stream_finish_and_refuses_new_requests(
    gateways: GatewayLauncher, fleets: FleetLauncher, redis_url: str
) -> None:
    slow = fleets.start(
        [model(speed={"step_base_ms": 20, "decode_per_seq_ms": 0, "prefill_per_token_ms": 0})]
    )
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(slow.urls)
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)

    async def refused() -> bool:
        try:
            async with aiohttp.ClientSession() as other:
                await other.get(gateway.url + "/healthz")
        except aiohttp.ClientConnectionError:
            return True
        return False

    async def stream_through_shutdown() -> tuple[int, bool, bool]:
        async with aiohttp.ClientSession() as session:
            body = chat_body(max_tokens=50, stream=True, ignore_eos=True)
            url = gateway.url + "/v1/chat/completions"
            async with session.post(url, json=body, headers=auth(ACME_KEY)) as response:
                tokens, done, new_refused = 0, False, False
                async for line in response.content:
                    if b'"content":" ' in line:
                        tokens += 1
                        if tokens == 5:
                            gateway.process.terminate()  # SIGTERM mid-answer
                        if tokens == 15:
                            new_refused = await refused()
                    done = done or line.startswith(b"data: [DONE]")
                return tokens, done, new_refused

    tokens, done, new_refused = asyncio.run(stream_through_shutdown())
    assert (tokens, done) == (50, True)
    assert new_refused
    # uvicorn exits by re-raising the signal once the drain is over.
    assert gateway.process.wait(timeout=10) == -15


def test_an_unasked_allowance_is_fitted_to_the_models_context(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(fleet.urls[:1], acme_budget=Budget(default_output_allowance=5000))
    sized = snapshot.deployments["base"].model_copy(update={"max_model_len": 1024})
    snapshot = snapshot.model_copy(update={"deployments": {"base": sized}})
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    body = chat_body()
    del body["max_tokens"]
    status, answer, _ = post(gateway, body)
    assert status == 200, answer


def test_a_tenant_past_its_soft_limit_is_refused_or_sent_to_the_cheaper_route(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(fleet.urls[:1])
    cheap = snapshot.routes[ROUTE].model_copy(
        update={"name": "cheap", "salt": "", "rollout_id": None}
    )
    rerouted = Budget(soft_limit_action="route", soft_limit_route="cheap")
    tenants = {
        # acme is past its soft limit and its budget names the cheaper route; globex refuses.
        "acme": snapshot.tenants["acme"].model_copy(
            update={"over_soft_limit": True, "budget": rerouted}
        ),
        "globex": snapshot.tenants["globex"].model_copy(update={"over_soft_limit": True}),
    }
    snapshot = snapshot.model_copy(
        update={"tenants": tenants, "routes": {**snapshot.routes, "cheap": cheap}}
    )
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)

    status, body, _ = post(gateway, chat_body(), key=ACME_KEY)
    assert (status, body["model"]) == (200, "cheap")

    status, body, headers = post(gateway, chat_body(), key=GLOBEX_KEY)
    assert status == 429
    assert body["error"]["code"] == "soft_limit"  # type: ignore[index]
    assert headers["retry-after"] == "60"
    refused = [orjson.loads(f[b"r"]) for _, f in _stream(redis_url)]
    assert [(r["tenant"], r["route"], r["reason"]) for r in refused] == [
        ("acme", "cheap", None),
        ("globex", ROUTE, "soft_limit"),
    ]


def test_a_completion_with_several_prompts_is_refused_and_a_list_of_one_is_served(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    # The replica would answer one choice per prompt, each up to max_tokens: more than the one
    # reservation admitted, and more than one answer to measure.
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(fleet.urls[:1], acme_budget=Budget(output_tokens_per_minute=10))
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    several = {"model": ROUTE, "prompt": ["one", "two", "three"], "max_tokens": 6}
    status, body, _ = post(gateway, several, path="/v1/completions")
    assert status == 400
    assert body["error"]["code"] == "multiple_prompts"  # type: ignore[index]
    assert body["error"]["param"] == "prompt"  # type: ignore[index]
    one = {"model": ROUTE, "prompt": ["one"], "max_tokens": 6}
    status, body, _ = post(gateway, one, path="/v1/completions")
    assert status == 200
    assert len(body["choices"]) == 1  # type: ignore[arg-type]
