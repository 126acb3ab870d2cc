"""The REST API over HTTP: bearer token, JSON in and out, safe retries, errors a person can act on.

Every write (POST, PUT, PATCH) carries an `Idempotency-Key`, and a retry sends the very same
request (same bytes, same key) again: the server then replays its first answer instead of doing
the write twice (core/idempotency.py). That is what makes it safe to retry a POST whose answer
was lost to a dropped connection or a timeout, which is exactly when a CI runner cannot tell
whether the rollout started.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from importlib import metadata
from typing import Any
from urllib.parse import quote

import click
import requests

from cli.errors import ApiError, CliError, Unreachable

IDEMPOTENCY_HEADER = "Idempotency-Key"
WRITES = frozenset({"POST", "PUT", "PATCH"})
# A gateway or load balancer in front of the control plane answers these while the app restarts
# or is overloaded; the request may not have reached the app, and the key makes resending safe.
RETRY_STATUSES = frozenset({502, 503, 504})
DEFAULT_RETRIES = 3
# Backoff between attempts: BACKOFF_S, then doubling, at most MAX_BACKOFF_S (and at most
# MAX_RETRY_AFTER_S when the server asks for longer with Retry-After).
BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 30.0
# (connect, read): a control plane that does not accept the connection in 5 s is down; 30 s
# leaves room for the slowest write (an eval upload, a rollout start with its preflight).
TIMEOUT_S = (5.0, 30.0)
_ERRNO_TEXT = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def _user_agent() -> str:
    try:
        version = metadata.version("tollgate")
    except metadata.PackageNotFoundError:
        version = "0+unknown"
    return f"tollgate-cli/{version} requests/{requests.__version__}"


def _stderr(line: str) -> None:
    click.echo(f"tollgate: {line}", err=True)


def segment(value: str) -> str:
    """One path segment, quoted: names and versions never split or escape a URL path."""
    return quote(value, safe="")


class Api:
    """A client of one control plane with one token; close it when done."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        retries: int = DEFAULT_RETRIES,
        log: Callable[[str], None] = _stderr,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.log = log
        self.session = requests.Session()
        # The token goes into this header and nowhere else: no message ever repeats it.
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.headers["Accept"] = "application/json"
        self.session.headers["User-Agent"] = _user_agent()

    def close(self) -> None:
        self.session.close()

    def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, payload: Any) -> Any:
        # Encoded once, here: every retry must send the same bytes, or the server takes it for
        # another request under the same key (a 422).
        body = json.dumps(payload).encode()
        return self.request("POST", path, body=body, content_type="application/json")

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        content_type: str | None = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        """The answer's JSON (None when it has no body); raises CliError / ApiError."""
        headers: dict[str, str] = {}
        if content_type:
            headers["Content-Type"] = content_type
        if method in WRITES:
            # One key per write, made before the first attempt and sent again with each retry.
            headers[IDEMPOTENCY_HEADER] = str(uuid.uuid4())
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                response = self.session.request(
                    method,
                    self.base_url + path,
                    data=body,
                    headers=headers,
                    params=params,
                    timeout=TIMEOUT_S,
                    # A redirect would turn a POST into a GET or drop the token on another host.
                    allow_redirects=False,
                )
            except (
                requests.ConnectionError,
                requests.Timeout,
                requests.exceptions.ChunkedEncodingError,
            ) as exc:
                if attempt == attempts:
                    raise self._unreachable(exc, attempts) from exc
                self._pause(method, path, _why(exc), attempt, attempts, None)
                continue
            except requests.RequestException as exc:
                raise CliError(
                    f"{method} {path} could not be sent: {type(exc).__name__}",
                    hint="check TOLLGATE_URL (the control plane's base URL, e.g. "
                    "http://127.0.0.1:8000)",
                ) from exc
            if response.status_code in RETRY_STATUSES and attempt < attempts:
                why = f"{response.status_code} {response.reason}"
                self._pause(
                    method, path, why, attempt, attempts, response.headers.get("Retry-After")
                )
                continue
            return self._answer(method, path, response)
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def _pause(
        self,
        method: str,
        path: str,
        why: str,
        attempt: int,
        attempts: int,
        retry_after: str | None,
    ) -> None:
        delay = min(BACKOFF_S * 2 ** (attempt - 1), MAX_BACKOFF_S)
        if retry_after and retry_after.strip().isdigit():
            delay = max(delay, min(float(retry_after), MAX_RETRY_AFTER_S))
        same_key = f" with the same {IDEMPOTENCY_HEADER}" if method in WRITES else ""
        self.log(
            f"{method} {path}: {why}; retrying in {delay:.1f} s{same_key} "
            f"(attempt {attempt + 1} of {attempts})"
        )
        time.sleep(delay)

    def _unreachable(self, exc: requests.RequestException, attempts: int) -> Unreachable:
        return Unreachable(
            f"cannot reach the control plane at {self.base_url}: {_why(exc)} "
            f"({attempts} attempt{'s' if attempts > 1 else ''})",
            hint="check TOLLGATE_URL (the control plane's base URL, e.g. http://127.0.0.1:8000) "
            "and that the server is up and reachable from this machine",
        )

    def _answer(self, method: str, path: str, response: requests.Response) -> Any:
        status = response.status_code
        if 200 <= status < 300:
            if not response.content:
                return None
            try:
                return response.json()
            except ValueError as exc:
                raise CliError(
                    f"{method} {path} answered {status} with something that is not JSON",
                    hint="check that TOLLGATE_URL is the control plane's base URL",
                ) from exc
        if 300 <= status < 400:
            location = response.headers.get("Location", "?")
            raise ApiError(
                f"{method} {path} was redirected ({status}) to {location}",
                status=status,
                hint="set TOLLGATE_URL to the address the server redirects to (https?)",
            )
        try:
            message = api_message(response.json())
            from_api = True
        except ValueError:
            text = " ".join(response.text.split())[:200]
            message = f"(not an answer of the Tollgate API) {text}" if text else "(no body)"
            from_api = False
        raise ApiError(
            f"{method} {path} answered {status} {response.reason}: {message}",
            status=status,
            hint=error_hint(status, message, self.base_url, from_api=from_api),
        )


def _why(exc: requests.RequestException) -> str:
    """What went wrong in a few words, not urllib3's nested repr."""
    if isinstance(exc, requests.ConnectTimeout):
        return f"no connection within {TIMEOUT_S[0]:.0f} s"
    if isinstance(exc, requests.Timeout):
        return f"no answer within {TIMEOUT_S[1]:.0f} s"
    match = _ERRNO_TEXT.search(str(exc))
    if match:
        return match.group(1).strip().lower()
    if "RemoteDisconnected" in str(exc) or "Connection aborted" in str(exc):
        return "the connection closed without an answer"
    return type(exc).__name__


def api_message(body: Any) -> str:
    """The API's own words: DRF's {"detail": ...} or {field: [messages]}, nested ones flattened
    to `field.sub: message`."""
    if isinstance(body, dict) and set(body) == {"detail"}:
        body = body["detail"]
    return "; ".join(_messages(body, "")) or "(no message)"


def _messages(value: Any, where: str) -> list[str]:
    if isinstance(value, dict):
        found: list[str] = []
        for key, inner in value.items():
            name = str(key) if key != "non_field_errors" else ""
            found += _messages(inner, f"{where}.{name}" if where and name else where or name)
        return found
    if isinstance(value, list):
        if all(not isinstance(item, (dict, list)) for item in value):
            text = " ".join(str(item) for item in value)
            return [f"{where}: {text}" if where else text] if text else []
        found = []
        for index, item in enumerate(value):
            found += _messages(item, f"{where}[{index}]")
        return found
    return [f"{where}: {value}" if where else str(value)]


def error_hint(status: int, message: str, base_url: str, *, from_api: bool = True) -> str | None:
    """What to do about an error answer; None where the API's message already says it."""
    tokens_page = f"{base_url}/account/tokens/"
    if status == 401:
        return (
            "the API token is missing, invalid, revoked or expired: set TOLLGATE_TOKEN to a valid "
            f"token (make one on {tokens_page} or with `manage.py create_api_token USER --scope "
            "...`)"
        )
    if status == 403:
        if "scope" in message:
            return (
                "use a token that holds that scope: `tollgate token create --scope ...` or "
                f"{tokens_page} (a token never holds more than its owner's role allows)"
            )
        return "this needs a user whose role allows it (e.g. a release manager's token)"
    if status == 404 and not from_api:
        return (
            "check TOLLGATE_URL (the control plane's base URL, without /api/v1) and that this "
            "server has the endpoint (is it up to date?)"
        )
    if status == 404:
        return "check the name or id"
    if status == 429:
        return "the server is rate limiting: wait and run it again"
    if status >= 500:
        return "the control plane failed; its logs say why. Run the command again once it is fixed"
    return None
