"""Whatever a client sends, the gateway answers with something other than a 5xx, and lives."""

from __future__ import annotations

import http.client
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway.conftest import (
    ACME_KEY,
    ROUTE,
    GatewayLauncher,
    GatewayProcess,
    make_snapshot,
    publish,
    wait_for_version,
)
from tests.simfleet.harness import Fleet, request


@pytest.fixture(scope="module")
def gateway(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    url = os.environ["REDIS_URL"]
    redis.Redis.from_url(url).flushdb()
    launcher = GatewayLauncher(Path(tmp_path_factory.mktemp("fuzz")))
    gateway = launcher.start(redis_url=url)
    snapshot = make_snapshot(fleet.urls[:2])
    publish(url, snapshot)
    wait_for_version(gateway, snapshot.version)
    yield gateway
    launcher.stop_all()


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(), st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "tool"]) | json_values},
        optional={"content": st.text(max_size=50) | json_values, "tool_calls": json_values},
    ),
    max_size=3,
)
# Tenants' tool schemas: JSON of any shape, and the hostile ones (remote references, patterns
# that backtrack, references to themselves).
hostile_schemas = st.sampled_from(
    [
        {"$ref": "http://127.0.0.1:9/schema.json"},
        {"$ref": "#"},
        {"type": "object", "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}}},
        {"type": "object", "patternProperties": {"(x+x+)+y": {}}},
        {"$schema": "http://127.0.0.1:9/meta", "type": "object"},
    ]
)
tools = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": st.sampled_from(["f", "g"])},
                optional={"parameters": hostile_schemas | json_values},
            ),
        }
    ),
    min_size=1,
    max_size=2,
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.just(ROUTE) | st.text(max_size=10) | json_values,
        "messages": messages | json_values,
        "prompt": st.text(max_size=30) | st.lists(st.integers(0, 50_000), max_size=5) | json_values,
        "max_tokens": st.integers(-5, 5000) | json_values,
        "max_completion_tokens": st.integers(-5, 50) | json_values,
        "stream": st.booleans() | json_values,
        "stream_options": json_values,
        "tools": tools | json_values,
        "tool_choice": st.sampled_from(["required", "auto", "none"]) | json_values,
        "n": st.integers(-1, 3) | json_values,
        "user": st.text(max_size=10) | json_values,
        "temperature": json_values,
    },
)


def send(gateway: GatewayProcess, path: str, raw: bytes) -> int:
    port = int(gateway.url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        headers = {"content-type": "application/json", "authorization": f"Bearer {ACME_KEY}"}
        connection.request("POST", path, body=raw, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies, chat=st.booleans())
def test_json_bodies_never_produce_a_5xx(
    gateway: GatewayProcess, body: dict[str, Any], chat: bool
) -> None:
    path = "/v1/chat/completions" if chat else "/v1/completions"
    raw = orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY) if body else b"{}"
    assert send(gateway, path, raw) < 500


@settings(max_examples=60, deadline=None)
@given(raw=st.binary(max_size=200))
def test_arbitrary_bytes_never_produce_a_5xx(gateway: GatewayProcess, raw: bytes) -> None:
    assert send(gateway, "/v1/chat/completions", raw) < 500


def test_the_gateway_is_still_serving_after_the_fuzzing(gateway: GatewayProcess) -> None:
    assert gateway.process.poll() is None
    assert request("GET", f"{gateway.url}/healthz").status == 200
