"""The CLI run in-process (click's CliRunner) against a real control plane (pytest-django's
live_server on the test database), and a stand-in HTTP server for what a real one will not do on
cue: fail, drop a connection, or lose an answer on its way back."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner, Result
from pytest_django.live_server_helper import LiveServer

from cli import http as cli_http
from cli.main import cli
from tenants.choices import Scope
from tenants.models import User
from tenants.services.accounts import api_token_create

Invoke = Callable[..., Result]


@pytest.fixture
def server(live_server: LiveServer, transactional_db: None) -> str:
    """The base URL of a real control plane; the test's data is visible to it (committed)."""
    return str(live_server.url)


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries after 10 ms, not half a second: the retry logic is the same, the test quicker."""
    monkeypatch.setattr(cli_http, "BACKOFF_S", 0.01)


def run_cli(
    args: Sequence[str], *, url: str | None, token: str | None, **env: str | None
) -> Result:
    """`tollgate ARGS` with TOLLGATE_URL and TOLLGATE_TOKEN set as given (None: unset)."""
    environment: dict[str, str | None] = {
        "TOLLGATE_URL": url,
        "TOLLGATE_TOKEN": token,
        "TOLLGATE_RETRIES": None,
        **env,
    }
    return CliRunner().invoke(cli, list(args), env=environment, catch_exceptions=False)


@pytest.fixture
def tollgate(server: str, ci_token: str) -> Invoke:
    """`tollgate ARGS` against the live server with the CI pipeline's token."""

    def invoke(*args: str, token: str | None = ci_token, **env: str | None) -> Result:
        return run_cli(args, url=server, token=token, **env)

    return invoke


@pytest.fixture
def token_maker(ci_user: User) -> str:
    """A token of the CI user that may make tokens (ci_token may not), as wide as the tokens the
    tests make with it (a token gives no scope it does not hold)."""
    scopes = [Scope.TOKENS_WRITE, Scope.ROLLOUTS_READ, Scope.REGISTRY_READ, Scope.REGISTRY_WRITE]
    _, secret = api_token_create(actor=None, user=ci_user, name="maker", scopes=scopes)
    return secret


# --- a stand-in server ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """Answer with this status and JSON body."""

    status: int
    body: Any = None


@dataclass(frozen=True)
class Forward:
    """Pass the request to the real server and its answer back."""


@dataclass(frozen=True)
class Drop:
    """Close the connection without an answer; with `forward`, only after the real server has
    done the request (the answer is lost on its way back)."""

    forward: bool = False


Step = Reply | Forward | Drop


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class StandIn:
    """A tiny HTTP server on a free port. Each request takes the next scripted step; with no
    step left it is forwarded to `upstream` (or answered 404 without one). It records every
    request it gets."""

    upstream: str | None = None
    script: list[Step] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def take(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Step:
        self.seen.append(Seen(method, path, headers, body))
        if self.script:
            return self.script.pop(0)
        if self.upstream is None:
            return Reply(404, {"detail": "the stand-in has nothing scripted for this request"})
        return Forward()

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        assert self.upstream is not None
        target = urlsplit(self.upstream)
        connection = http.client.HTTPConnection(target.netloc, timeout=30)
        try:
            passed = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection")}
            connection.request(method, path, body=body or None, headers=passed)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()


def _handler(stand_in: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: pytest shows what the test asserts

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = dict(self.headers.items())
            step = stand_in.take(self.command, self.path, headers, body)
            if isinstance(step, Drop):
                if step.forward:
                    stand_in.forward(self.command, self.path, headers, body)
                self.close_connection = True
                return
            if isinstance(step, Forward):
                status, upstream_headers, content = stand_in.forward(
                    self.command, self.path, headers, body
                )
                self.send_response(status)
                for name, value in upstream_headers:
                    if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(name, value)
            else:
                status, content = step.status, json.dumps(step.body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = do_PUT = do_PATCH = _handle

    return Handler


@pytest.fixture
def stand_in_factory() -> Iterator[Callable[..., StandIn]]:
    servers: list[ThreadingHTTPServer] = []

    def start(upstream: str | None = None, script: Sequence[Step] = ()) -> StandIn:
        stand_in = StandIn(upstream=upstream, script=list(script))
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stand_in))
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        stand_in.url = f"http://127.0.0.1:{httpd.server_address[1]}"
        return stand_in

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()
