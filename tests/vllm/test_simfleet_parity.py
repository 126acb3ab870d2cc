"""simfleet against the real server: the same requests to both, their answers compared by shape
(status codes, error types and parameters, the fields of every body and stream chunk, the order of
a stream, the runtime LoRA API, the metric families Tollgate reads). Whatever simfleet does
differently, every other test of Tollgate silently believes; this is where it shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.simfleet.harness import Fleet, FleetLauncher, model
from tests.vllm.conftest import BASE_MODEL, MAX_MODEL_LEN, VLLM

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Fleet]:
    launcher = FleetLauncher(tmp_path)
    yield launcher.start([model(name=BASE_MODEL, max_model_len=MAX_MODEL_LEN)])
    launcher.stop_all()


def shape(value: Any) -> Any:
    """A JSON value with its leaves replaced by their types: what a client's parser relies on."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def post(url: str, path: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(f"{url}{path}", json=body, timeout=60)


def stream_chunks(url: str, body: dict[str, Any]) -> list[dict[str, Any] | str]:
    """The events of a stream, in order (`[DONE]` as a string)."""
    response = requests.post(f"{url}/v1/chat/completions", json=body, stream=True, timeout=60)
    assert response.status_code == 200, response.text
    events: list[dict[str, Any] | str] = []
    for line in response.iter_lines():
        if line.startswith(b"data: "):
            data = line.removeprefix(b"data: ")
            events.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return events


def kinds(events: list[dict[str, Any] | str]) -> list[str]:
    """A stream's order as kinds of event, repeats collapsed: role, content, finish, usage, done."""
    out: list[str] = []
    for event in events:
        if isinstance(event, str):
            kind = "done"
        elif not event["choices"]:
            kind = "usage"
        elif event["choices"][0].get("finish_reason"):
            kind = "finish"
        elif "role" in event["choices"][0]["delta"]:
            kind = "role"
        else:
            kind = "content"
        if not out or out[-1] != kind:
            out.append(kind)
    return out


def error_of(response: requests.Response) -> tuple[int, str, Any]:
    error = response.json()["error"]
    return response.status_code, error["type"], error.get("param")


CHAT = {"model": BASE_MODEL, "messages": [{"role": "user", "content": "Hello there"}]}


def test_chat_completions_and_streams_have_the_real_servers_shape(vllm: VLLM, sim: Fleet) -> None:
    body = {**CHAT, "max_tokens": 4, "ignore_eos": True}
    real, fake = (
        post(vllm.url, "/v1/chat/completions", body),
        post(sim.url, "/v1/chat/completions", body),
    )
    assert (real.status_code, fake.status_code) == (200, 200)
    assert set(fake.json()) >= {"id", "object", "created", "model", "choices", "usage"}
    assert shape(fake.json()["usage"]).keys() >= {"prompt_tokens", "completion_tokens"}
    assert real.json()["choices"][0]["finish_reason"] == fake.json()["choices"][0]["finish_reason"]

    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    real_events, fake_events = stream_chunks(vllm.url, streamed), stream_chunks(sim.url, streamed)
    assert kinds(fake_events) == kinds(real_events)
    assert real_events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # type: ignore[index]
    assert fake_events[0]["choices"][0]["delta"] == real_events[0]["choices"][0]["delta"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {**CHAT, "max_tokens": MAX_MODEL_LEN + 100}),
        ("/v1/chat/completions", {**CHAT, "model": "no-such-model"}),
        (
            "/v1/completions",
            {"model": BASE_MODEL, "prompt": "word " * (MAX_MODEL_LEN + 50), "max_tokens": 4},
        ),
    ],
    ids=["max_tokens beyond the context", "unknown model", "prompt beyond the context"],
)
def test_refusals_have_the_real_servers_status_type_and_param(
    vllm: VLLM, sim: Fleet, path: str, body: dict[str, Any]
) -> None:
    real, fake = post(vllm.url, path, body), post(sim.url, path, body)
    assert error_of(fake) == error_of(real), (real.text, fake.text)


def test_the_runtime_lora_api_answers_like_the_real_server(vllm: VLLM, sim: Fleet) -> None:
    adapter = str(vllm.adapter("v1"))
    answers: dict[str, list[int]] = {"real": [], "fake": []}
    for name, url in (("real", vllm.url), ("fake", sim.url)):
        load = {"lora_name": f"parity-{name}", "lora_path": adapter}
        answers[name].append(post(url, "/v1/load_lora_adapter", load).status_code)
        answers[name].append(post(url, "/v1/load_lora_adapter", load).status_code)  # again
        missing = {"lora_name": f"parity-missing-{name}", "lora_path": "/nonexistent/adapter"}
        answers[name].append(post(url, "/v1/load_lora_adapter", missing).status_code)
        listed = requests.get(f"{url}/v1/models", timeout=10).json()["data"]
        parents = {m["id"]: m.get("parent") for m in listed}
        answers[name].append(200 if parents.get(f"parity-{name}") == BASE_MODEL else 0)
        unload = {"lora_name": f"parity-{name}"}
        answers[name].append(post(url, "/v1/unload_lora_adapter", unload).status_code)
        chat = {**CHAT, "model": f"parity-{name}", "max_tokens": 2}
        answers[name].append(post(url, "/v1/chat/completions", chat).status_code)
    assert answers["fake"] == answers["real"], answers


def test_the_metric_families_tollgate_reads_exist_with_the_same_types(
    vllm: VLLM, sim: Fleet
) -> None:
    post(vllm.url, "/v1/chat/completions", {**CHAT, "max_tokens": 2})
    post(sim.url, "/v1/chat/completions", {**CHAT, "max_tokens": 2})

    def families(url: str) -> dict[str, str]:
        text = requests.get(f"{url}/metrics", timeout=10).text
        return {
            f.name: f.type
            for f in text_string_to_metric_families(text)
            if f.name.startswith("vllm:")
        }

    real, fake = families(vllm.url), families(sim.url)
    read = {
        "vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens",
    }  # fmt: skip
    assert read <= real.keys(), sorted(read - real.keys())
    assert {name: fake.get(name) for name in read} == {name: real[name] for name in read}
