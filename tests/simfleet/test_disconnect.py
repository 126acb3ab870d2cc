"""A client that goes away aborts its request at once, as vLLM does.

The gateway relies on this: a request it cancels must stop costing engine time and must stop
adding generated tokens, or canary cost and throughput figures drift.
"""

from __future__ import annotations

import time

import openai
import pytest

from tests.simfleet.harness import Fleet, FleetLauncher, metric, model, wait_until

# 50 tokens a second: a 1,000-token answer would run for 20 s.
SLOW = {"step_base_ms": 20.0, "decode_per_seq_ms": 0.0, "prefill_per_token_ms": 0.0}
LABELS = {"model_name": "slow"}


@pytest.fixture(scope="module")
def fleet(module_fleets: FleetLauncher) -> Fleet:
    return module_fleets.start([model("slow", speed=SLOW, answer_tokens=100_000)])


def running(fleet: Fleet) -> float:
    return metric(fleet.url, "vllm:num_requests_running", **LABELS)


def finished(fleet: Fleet) -> float:
    return metric(fleet.url, "vllm:request_success_total", **LABELS)


def assert_generation_stopped(fleet: Fleet) -> None:
    generated = metric(fleet.url, "vllm:generation_tokens_total", **LABELS)
    time.sleep(0.3)  # 15 steps of the slow model
    assert metric(fleet.url, "vllm:generation_tokens_total", **LABELS) == generated


def test_closing_a_stream_aborts_the_request_at_once(fleet: Fleet) -> None:
    before = finished(fleet)
    with fleet.client() as client:
        stream = client.chat.completions.create(
            model="slow",
            messages=[{"role": "user", "content": "tell me everything"}],
            max_tokens=1000,
            stream=True,
        )
        tokens = 0
        for chunk in stream:
            tokens += bool(chunk.choices and chunk.choices[0].delta.content)
            if tokens == 3:
                break
        assert running(fleet) == 1
        stream.close()
        assert wait_until(lambda: running(fleet) == 0, seconds=1.0) < 1.0
    assert_generation_stopped(fleet)
    # vLLM does not count a client's abort in request_success, under any finished_reason.
    assert finished(fleet) == before


def test_a_client_timeout_on_a_plain_request_aborts_it(fleet: Fleet) -> None:
    generated = metric(fleet.url, "vllm:generation_tokens_total", **LABELS)
    with fleet.client(timeout=0.3) as client, pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(
            model="slow", messages=[{"role": "user", "content": "x"}], max_tokens=1000
        )
    assert metric(fleet.url, "vllm:generation_tokens_total", **LABELS) > generated + 5
    wait_until(lambda: running(fleet) == 0, seconds=1.0)
    assert_generation_stopped(fleet)
