"""Faults switched on at run time through /admin: each one must show where a client looks.

The tests that only change faults share a fleet and reset its faults afterwards; the OOM tests
kill the engine and start their own.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
)

from tests.simfleet.harness import Fleet, FleetLauncher, healthy, metric, model, request
from tests.simfleet.tools import SCHEMAS, TOOLS, matches_schema

SPEED = {"step_base_ms": 2.0, "decode_per_seq_ms": 0.1, "prefill_per_token_ms": 0.2}
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
DEFAULT_FAULTS = {
    "ttft_multiplier": 1.0,
    "tpot_multiplier": 1.0,
    "error_rate": 0.0,
    "hang_rate": 0.0,
    "kv_cache_fraction": 1.0,
    "tool_call_validity": None,
    "restart_warmup_s": 2.0,
}


def faulty_model() -> dict[str, Any]:
    return model(
        "faulty",
        speed=SPEED,
        answer_tokens=100_000,
        tool_call_validity=1.0,
        tool_call_probability=1.0,
    )


@pytest.fixture(scope="module")
def shared(module_fleets: FleetLauncher) -> Fleet:
    return module_fleets.start([faulty_model()])


@pytest.fixture
def fleet(shared: Fleet) -> Iterator[Fleet]:
    yield shared
    shared.reset_faults()


def set_faults(fleet: Fleet, **changes: Any) -> dict[str, Any]:
    reply = request("POST", f"{fleet.url}/admin/faults", changes)
    assert reply.status == 200, reply.body
    faults: dict[str, Any] = reply.json()
    return faults


def get_faults(fleet: Fleet) -> dict[str, Any]:
    faults: dict[str, Any] = request("GET", f"{fleet.url}/admin/faults").json()
    return faults


def state(fleet: Fleet) -> dict[str, Any]:
    """The engine of the "faulty" model as /admin/state shows it."""
    engine: dict[str, Any] = request("GET", f"{fleet.url}/admin/state").json()["engines"]["faulty"]
    return engine


def seconds(action: Callable[[], object], times: int = 3) -> float:
    durations = []
    for _ in range(times):
        start = time.perf_counter()
        action()
        durations.append(time.perf_counter() - start)
    return statistics.median(durations)


def first_token(client: openai.OpenAI, prompt: str) -> None:
    with client.chat.completions.create(
        model="faulty",
        messages=[{"role": "user", "content": prompt}],
        max_tokens=1,
        stream=True,
    ) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                return


# --- the admin endpoint -------------------------------------------------------------------------


def test_faults_start_off_and_a_post_merges_into_them(fleet: Fleet) -> None:
    assert get_faults(fleet) == DEFAULT_FAULTS
    assert set_faults(fleet, ttft_multiplier=3.0) == {**DEFAULT_FAULTS, "ttft_multiplier": 3.0}
    merged = set_faults(fleet, error_rate=0.25)
    assert merged == {**DEFAULT_FAULTS, "ttft_multiplier": 3.0, "error_rate": 0.25}
    assert get_faults(fleet) == merged
    assert request("DELETE", f"{fleet.url}/admin/faults").json() == DEFAULT_FAULTS
    assert get_faults(fleet) == DEFAULT_FAULTS


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"no_such_fault": 1}, "no_such_fault"),
        ({"ttft_multiplier": -2}, "ttft_multiplier"),
        ({"tpot_multiplier": 0}, "tpot_multiplier"),
        ({"error_rate": 1.5}, "error_rate"),
        ({"kv_cache_fraction": 0}, "kv_cache_fraction"),
        ({"hang_rate": "often"}, "hang_rate"),
    ],
)
def test_invalid_faults_are_a_400_naming_the_field_and_change_nothing(
    fleet: Fleet, change: dict[str, Any], field: str
) -> None:
    before = set_faults(fleet, tpot_multiplier=2.0)
    reply = request("POST", f"{fleet.url}/admin/faults", change)
    assert reply.status == 400
    error = reply.json()["error"]
    assert error["code"] == 400
    assert field in error["message"]
    assert get_faults(fleet) == before


def test_a_faults_body_that_is_not_json_is_a_400(fleet: Fleet) -> None:
    reply = request("POST", f"{fleet.url}/admin/faults", raw=b"ttft_multiplier=3")
    assert reply.status == 400
    assert get_faults(fleet) == DEFAULT_FAULTS


# --- latency ------------------------------------------------------------------------------------


def test_ttft_multiplier_delays_the_first_token(fleet: Fleet) -> None:
    prompt = "word " * 200  # ~40 ms of prefill
    with fleet.client() as client:
        normal = seconds(lambda: first_token(client, prompt))
        set_faults(fleet, ttft_multiplier=10.0)
        slow = seconds(lambda: first_token(client, prompt))
    assert slow > 0.3
    assert slow > 4 * normal


def test_tpot_multiplier_slows_every_token(fleet: Fleet) -> None:
    def answer(client: openai.OpenAI) -> None:
        client.chat.completions.create(model="faulty", messages=HELLO, max_tokens=20)

    with fleet.client() as client:
        normal = seconds(lambda: answer(client))  # 20 steps of ~2 ms
        set_faults(fleet, tpot_multiplier=10.0)
        slow = seconds(lambda: answer(client))
    assert slow > 0.3
    assert slow > 4 * normal


# --- errors and hangs ---------------------------------------------------------------------------


def test_error_rate_one_fails_every_request_with_vllms_error_envelope(fleet: Fleet) -> None:
    set_faults(fleet, error_rate=1.0)
    with fleet.client() as client:
        for stream in (False, True):
            with pytest.raises(openai.InternalServerError) as caught:
                client.chat.completions.create(
                    model="faulty", messages=HELLO, max_tokens=2, stream=stream
                )
            assert caught.value.status_code == 500
            assert caught.value.type == "InternalServerError"
    reply = request(
        "POST", f"{fleet.url}/v1/completions", {"model": "faulty", "prompt": "x", "max_tokens": 2}
    )
    assert reply.status == 500
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == 500
    assert error["message"]

    fleet.reset_faults()
    with fleet.client() as client:
        client.chat.completions.create(model="faulty", messages=HELLO, max_tokens=2)


def test_hung_request_produces_no_token_while_it_shows_as_running(fleet: Fleet) -> None:
    set_faults(fleet, hang_rate=1.0)
    generated = metric(fleet.url, "vllm:generation_tokens_total", model_name="faulty")

    def hang() -> BaseException | None:
        with fleet.client(timeout=1.5) as client:
            try:
                client.chat.completions.create(model="faulty", messages=HELLO, max_tokens=5)
            except openai.APITimeoutError as exc:
                return exc
        return None

    with ThreadPoolExecutor(max_workers=1) as pool:
        outcome = pool.submit(hang)
        wait_for_running(fleet, 1)
        assert metric(fleet.url, "vllm:num_requests_running", model_name="faulty") == 1
        assert state(fleet)["kv_used_tokens"] > 0
        assert isinstance(outcome.result(timeout=10), openai.APITimeoutError)
    assert metric(fleet.url, "vllm:generation_tokens_total", model_name="faulty") == generated
    # The client gave up and left: the hung request is aborted like any other.
    wait_for_running(fleet, 0)


def wait_for_running(fleet: Fleet, count: int, within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while state(fleet)["running"] != count:
        assert time.monotonic() < deadline, f"running never reached {count}"
        time.sleep(0.02)


# --- KV cache and tools -------------------------------------------------------------------------


def test_kv_cache_fraction_shrinks_the_cache_and_makes_requests_wait(fleet: Fleet) -> None:
    # 32768 tokens * 0.005 = 163: three ~46-token prompts fill it.
    set_faults(fleet, kv_cache_fraction=0.005)
    assert state(fleet)["kv_capacity_tokens"] == 163
    prompt: list[ChatCompletionMessageParam] = [{"role": "user", "content": "word " * 40}]

    def ask() -> int:
        with fleet.client() as client:
            answer = client.chat.completions.create(model="faulty", messages=prompt, max_tokens=40)
        return answer.usage.completion_tokens if answer.usage else 0

    most_waiting = 0
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = [pool.submit(ask) for _ in range(6)]
        while not all(answer.done() for answer in answers):
            most_waiting = max(most_waiting, state(fleet)["waiting"])
            time.sleep(0.01)
    assert [answer.result() for answer in answers] == [40] * 6
    assert most_waiting >= 1


def test_tool_call_validity_fault_breaks_tool_calls(fleet: Fleet) -> None:
    def arguments(client: openai.OpenAI) -> tuple[str, str]:
        answer = client.chat.completions.create(
            model="faulty", messages=HELLO, tools=TOOLS, tool_choice="required", max_tokens=200
        )
        (call,) = answer.choices[0].message.tool_calls or []
        assert isinstance(call, ChatCompletionMessageFunctionToolCall)
        return call.function.name, call.function.arguments

    with fleet.client() as client:
        name, args = arguments(client)
        assert matches_schema(args, SCHEMAS[name]), args
        set_faults(fleet, tool_call_validity=0.0)
        for _ in range(6):
            name, args = arguments(client)
            assert not matches_schema(args, SCHEMAS[name]), args


# --- OOM ----------------------------------------------------------------------------------------


def oom_fleet(fleets: FleetLauncher) -> Fleet:
    return fleets.start([faulty_model()], faults={"restart_warmup_s": 1.0})


def read_with_oom_at_first_token(fleet: Fleet, stream: openai.Stream[ChatCompletionChunk]) -> None:
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            assert request("POST", f"{fleet.url}/admin/oom").status == 200


def test_oom_fails_requests_and_health_until_a_restart(fleets: FleetLauncher) -> None:
    fleet = oom_fleet(fleets)
    with fleet.client() as client:
        stream = client.chat.completions.create(
            model="faulty", messages=HELLO, max_tokens=1000, stream=True
        )
        with stream, pytest.raises(openai.APIError) as in_flight:
            read_with_oom_at_first_token(fleet, stream)
        assert "CUDA out of memory" in in_flight.value.message

        assert request("GET", f"{fleet.url}/health").status == 503
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="faulty", messages=HELLO, max_tokens=2)
        assert "CUDA out of memory" in str(caught.value.body)
        assert caught.value.type == "InternalServerError"

        time.sleep(1.5)  # longer than the warm-up: a dead engine does not heal by itself
        assert request("GET", f"{fleet.url}/health").status == 503
        assert request("GET", f"{fleet.url}/admin/state").json()["healthy"] is False
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="faulty", messages=HELLO, max_tokens=2)


def test_restart_after_oom_is_unhealthy_during_the_warm_up_then_serves(
    fleets: FleetLauncher,
) -> None:
    fleet = oom_fleet(fleets)
    assert get_faults(fleet)["restart_warmup_s"] == 1.0  # the config's faults are in force
    assert request("POST", f"{fleet.url}/admin/oom").status == 200
    assert request("POST", f"{fleet.url}/admin/restart").status == 200
    restarted = time.monotonic()
    assert request("GET", f"{fleet.url}/health").status == 503
    deadline = restarted + 5
    while not healthy(fleet.url):
        assert time.monotonic() < deadline, "never healthy after the restart"
        time.sleep(0.05)
    assert time.monotonic() - restarted > 0.8
    with fleet.client() as client:
        answer = client.chat.completions.create(model="faulty", messages=HELLO, max_tokens=2)
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 2
