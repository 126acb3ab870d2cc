"""Peers that never finish: a replica that accepts and never answers, clients that trickle or idle.

Each would otherwise hold a request or a socket of the gateway for ever.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest

from gateway.snapshot import Budget
from tests.conftest import free_port
from tests.gateway.conftest import (
    ACME_KEY,
    GatewayLauncher,
    GatewayProcess,
    chat_body,
    make_snapshot,
    serve,
)
from tests.gateway.test_limits import post
from tests.simfleet.harness import Fleet, FleetLauncher, metric, model, wait_until


@contextlib.contextmanager
def replica_server(handle: Callable[[socket.socket], None]) -> Iterator[str]:
    """A TCP server whose every connection `handle` serves, one after the other; connections
    stay open until the server stops."""
    server = socket.create_server(("127.0.0.1", free_port()))
    held: list[socket.socket] = []
    stopping = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stopping.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            held.append(connection)
            handle(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stopping.set()
    thread.join()
    for connection in held:
        connection.close()
    server.close()


def holding_replica(first: bytes) -> contextlib.AbstractContextManager[str]:
    """A replica that reads what it is sent, answers `first` (maybe nothing) and then never
    another byte."""

    def answer_first(connection: socket.socket) -> None:
        if first:
            connection.recv(65536)
            connection.sendall(first)

    return replica_server(answer_first)


@pytest.fixture
def silent_replica() -> Iterator[str]:
    with holding_replica(b"") as url:
        yield url


@pytest.fixture
def bursting_replica() -> Iterator[str]:
    """A replica that answers each request with its whole stream, headers and 3,000 events
    (~600 KB), in one write, as a fast replica's answer can arrive in one read."""
    events = [
        orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                      "model": "tiny", "choices": [{"index": 0, "delta": {"content": f" w{i}"},
                                                    "logprobs": None, "finish_reason": None}]})
        for i in range(3000)
    ]  # fmt: skip
    events.append(orjson.dumps({"id": "chatcmpl-1", "model": "tiny", "choices": [
        {"index": 0, "delta": {}, "finish_reason": "length"}]}))  # fmt: skip
    events.append(orjson.dumps({"id": "chatcmpl-1", "model": "tiny", "choices": [],
                                "usage": {"prompt_tokens": 5, "completion_tokens": 3000,
                                          "total_tokens": 3005}}))  # fmt: skip
    body = b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"content-length: %d\r\n\r\n%b" % (len(body), body)
    )

    def answer_whole(connection: socket.socket) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            request += connection.recv(65536)
        head, _, rest = request.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        while len(rest) < length:
            rest += connection.recv(65536)
        connection.sendall(answer)

    with replica_server(answer_whole) as url:
        yield url


def test_a_whole_answer_in_one_read_reaches_the_client_whole(
    gateways: GatewayLauncher, redis_url: str, bursting_replica: str
) -> None:
    gateway = serve(gateways, redis_url, make_snapshot([bursting_replica]))
    status, answer, _ = post(gateway, chat_body(max_tokens=3000))
    assert status == 200, answer
    choice = answer["choices"][0]  # type: ignore[index]
    assert choice["message"]["content"] == "".join(f" w{i}" for i in range(3000))
    assert answer["usage"]["completion_tokens"] == 3000  # type: ignore[index]


def raw_connection(gateway: GatewayProcess) -> socket.socket:
    parts = urlsplit(gateway.url)
    return socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10)


def read_all(connection: socket.socket) -> bytes:
    """What the gateway sends until it closes the connection."""
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


def test_a_replica_that_never_sends_its_headers_is_cut_at_the_first_token_deadline(
    gateways: GatewayLauncher, silent_replica: str, redis_url: str
) -> None:
    snapshot = make_snapshot([silent_replica])
    gateway = serve(gateways, redis_url, snapshot, GATEWAY_FIRST_TOKEN_TIMEOUT_S="0.5")
    started = time.monotonic()
    status, body, _ = post(gateway, chat_body())
    assert status == 504
    assert body["error"]["code"] == "first_token_timeout"  # type: ignore[index]
    assert time.monotonic() - started < 5


def test_a_replica_that_starts_a_refusal_and_stalls_is_cut_at_the_first_token_deadline(
    gateways: GatewayLauncher, redis_url: str
) -> None:
    first = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 100\r\n\r\n" + b'{"error": '
    with holding_replica(first) as replica:
        snapshot = make_snapshot([replica])
        gateway = serve(gateways, redis_url, snapshot, GATEWAY_FIRST_TOKEN_TIMEOUT_S="0.5")
        started = time.monotonic()
        status, body, _ = post(gateway, chat_body())
    assert status == 504
    assert body["error"]["code"] == "first_token_timeout"  # type: ignore[index]
    assert time.monotonic() - started < 5


def test_a_client_that_trickles_its_body_gets_a_408(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    snapshot = make_snapshot(fleet.urls[:1])
    gateway = serve(gateways, redis_url, snapshot, GATEWAY_BODY_TIMEOUT_S="0.5")
    body = orjson.dumps(chat_body())
    with raw_connection(gateway) as connection:
        connection.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
            + f"authorization: Bearer {ACME_KEY}\r\ncontent-type: application/json\r\n".encode()
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body[:10]
        )
        started = time.monotonic()
        answer = b""
        while b"}}" not in answer and (chunk := connection.recv(65536)):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"GATEWAY_BODY_TIMEOUT_S" in answer
    assert time.monotonic() - started < 5


def test_a_client_that_never_finishes_its_headers_is_answered_408_and_closed(
    gateways: GatewayLauncher, redis_url: str
) -> None:
    gateway = gateways.start(redis_url=redis_url, GATEWAY_HEADER_TIMEOUT_S="0.5")
    with raw_connection(gateway) as idle, raw_connection(gateway) as trickling:
        trickling.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gate")
        assert read_all(trickling).startswith(b"HTTP/1.1 408 ")
        assert read_all(idle).startswith(b"HTTP/1.1 408 ")  # never sent a byte


def test_connections_past_the_cap_are_refused_and_the_gateway_serves_again_after(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    snapshot = make_snapshot(fleet.urls[:1])
    gateway = serve(gateways, redis_url, snapshot, GATEWAY_MAX_CONNECTIONS="5")
    idle = [raw_connection(gateway) for _ in range(5)]
    time.sleep(0.2)  # let the gateway accept them all
    with raw_connection(gateway) as sixth:
        refused = read_all(sixth)
    assert refused.startswith(b"HTTP/1.1 503 ")
    assert b'"code":"busy"' in refused
    for connection in idle:
        connection.close()
    time.sleep(0.2)
    assert post(gateway, chat_body())[0] == 200


def test_a_client_that_stops_reading_does_not_make_the_gateway_hold_the_answer(
    gateways: GatewayLauncher, fleets: FleetLauncher, redis_url: str
) -> None:
    # A replica as fast as it can go, with room for an answer of 150,000 tokens (~30 MB).
    fast = fleets.start(
        [
            model(
                max_model_len=200_000,
                kv_cache_tokens=400_000,
                speed={"step_base_ms": 0, "decode_per_seq_ms": 0, "prefill_per_token_ms": 0},
            )
        ]
    )
    gateway = serve(
        gateways, redis_url, make_snapshot(fast.urls, acme_budget=Budget(tokens_per_day=10**9))
    )
    body = orjson.dumps(chat_body(max_tokens=150_000, stream=True, ignore_eos=True))

    def generated() -> float:
        return metric(fast.urls[0], "vllm:generation_tokens_total")

    before_mb = rss_mb(gateway)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that holds little
    parts = urlsplit(gateway.url)
    client.connect((parts.hostname or "", parts.port or 80))
    client.settimeout(30)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {ACME_KEY}"
        f"\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    client.sendall(head.encode() + body)
    received = bytearray(client.recv(4096))
    assert received.startswith(b"HTTP/1.1 200")

    # The client reads nothing more. The replica generates the whole answer anyway (vLLM's
    # engine does not wait for readers either) and holds what it could not send; the gateway
    # stops reading it once the client's socket is full, so its memory does not take the 30 MB.
    wait_until(lambda: generated() == 150_000, seconds=30)
    time.sleep(0.5)
    assert rss_mb(gateway) - before_mb < 10

    # Reading on is not tested here: simfleet itself stops sending a stream whose reader paused
    # for seconds, with or without the gateway between them (found with this test; not fixed).
    client.close()


def rss_mb(gateway: GatewayProcess) -> float:
    status = Path(f"/proc/{gateway.process.pid}/status").read_text()
    return (
        int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
        / 1024
    )
