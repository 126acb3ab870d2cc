"""The continuous-batching model: what a canary verdict reads from simfleet must follow from it.

The profiles here have costs far apart (prefill 0.5 ms a token, 2 ms per running sequence a
step), so each behaviour shows as a several-fold difference; the margins are wide on purpose:
these tests check the shape of the model, not the speed of this machine.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import openai
import pytest

from tests.simfleet.harness import Fleet, FleetLauncher, metric, model

PACED = {"step_base_ms": 1.0, "decode_per_seq_ms": 2.0, "prefill_per_token_ms": 0.5}
# Room for one full request and a half: requests must take turns and get preempted.
CRAMPED = {"step_base_ms": 4.0, "decode_per_seq_ms": 0.5, "prefill_per_token_ms": 0.01}


@pytest.fixture(scope="module")
def fleet(module_fleets: FleetLauncher) -> Fleet:
    return module_fleets.start(
        [
            model("paced", speed=PACED, max_model_len=2048, answer_tokens=100_000),
            model(
                "cramped",
                speed=CRAMPED,
                max_model_len=128,
                kv_cache_tokens=160,
                answer_tokens=100_000,
            ),
        ]
    )


async def timed_stream(
    client: openai.AsyncOpenAI, model_name: str, content: str, max_tokens: int
) -> tuple[float, list[float]]:
    """Streams one chat answer: (seconds to the first token, arrival time of every token)."""
    start = time.perf_counter()
    stream = await client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": content}],
        max_tokens=max_tokens,
        stream=True,
    )
    arrivals: list[float] = []
    async with stream:
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.perf_counter())
    assert len(arrivals) == max_tokens
    return arrivals[0] - start, arrivals


def tpot(arrivals: list[float]) -> float:
    return (arrivals[-1] - arrivals[0]) / (len(arrivals) - 1)


def test_ttft_grows_with_prompt_length(fleet: Fleet) -> None:
    async def measure(content: str) -> float:
        async with fleet.async_client() as client:
            ttfts = [(await timed_stream(client, "paced", content, 2))[0] for _ in range(3)]
        return statistics.median(ttfts)

    short = asyncio.run(measure("hi"))
    long = asyncio.run(measure("word " * 800))  # ~800 tokens: ~0.4 s of prefill
    assert long > 0.25
    assert long > short + 0.2
    assert long > 3 * short


def test_tpot_rises_with_concurrency(fleet: Fleet) -> None:
    async def measure(streams: int) -> float:
        async with fleet.async_client() as client:
            results = await asyncio.gather(
                *(timed_stream(client, "paced", "go", 30) for _ in range(streams))
            )
        return statistics.median(tpot(arrivals) for _, arrivals in results)

    alone = asyncio.run(measure(1))  # a step: 1 + 2 ms
    crowded = asyncio.run(measure(16))  # a step: 1 + 16 * 2 ms
    assert crowded > 0.015
    assert crowded > 3 * alone


def test_a_full_kv_cache_makes_requests_wait_and_preempts(fleet: Fleet) -> None:
    labels = {"model_name": "cramped"}
    preemptions = metric(fleet.url, "vllm:num_preemptions_total", **labels)
    queued = metric(fleet.url, "vllm:request_queue_time_seconds_sum", **labels)
    prompt = "word " * 40  # ~46 tokens: three prompts fill the 160-token cache

    async def run() -> tuple[list[int], float, float]:
        async with fleet.async_client() as client:
            requests = asyncio.gather(
                *(
                    client.chat.completions.create(
                        model="cramped",
                        messages=[{"role": "user", "content": prompt}],
                        max_tokens=60,
                    )
                    for _ in range(6)
                )
            )
            most_waiting = most_usage = 0.0
            while not requests.done():
                waiting, usage = await asyncio.to_thread(
                    lambda: (
                        metric(fleet.url, "vllm:num_requests_waiting", **labels),
                        metric(fleet.url, "vllm:kv_cache_usage_perc", **labels),
                    )
                )
                most_waiting, most_usage = max(most_waiting, waiting), max(most_usage, usage)
                await asyncio.sleep(0.01)
            answers = await requests
        completed = [a.usage.completion_tokens if a.usage else 0 for a in answers]
        return completed, most_waiting, most_usage

    completed, most_waiting, most_usage = asyncio.run(run())
    assert completed == [60] * 6  # preempted requests resume; no token is lost
    assert most_waiting >= 1
    assert most_usage > 0.8
    assert metric(fleet.url, "vllm:num_preemptions_total", **labels) > preemptions
    # Three requests wait for a running one to finish (60 steps of at least 4 ms).
    assert metric(fleet.url, "vllm:request_queue_time_seconds_sum", **labels) - queued > 0.2
