"""Whatever a client sends to any API path, the answer is never a 5xx.

The walk covers every pattern under /api/ in the URL conf and every method its view answers. Each
gets query strings with a NUL character, an out-of-range number and a long string in every query
parameter the OpenAPI schema names for it (and a few any view might read); path parameters with
the same; and, where it takes a body, bodies that are malformed, oversized, deeply nested, of the
wrong shape or media type, or that hold a NUL character. Requests carry a release manager's token
with every scope, so that the view gets past its permission checks; bodies are sent again with no
credentials, since authentication classes that read the body (the verdict endpoint's) see them
before any view does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from core.parsers import MAX_JSON_DEPTH
from tenants.models import User

NUL = "a\x00b"
HUGE_INT = "9" * 30
# Far past Python's recursion limit: json.loads raises RecursionError on it.
DEEP = 100_000
# Below the recursion limit: parses, and would reach serializers, the database and the renderer.
MEDIUM = 900
# Parameters any view might read without the schema naming them.
COMMON_PARAMETERS = {"format", "page", "search"}


@dataclass(frozen=True)
class Endpoint:
    route: str  # the pattern, as in the URL conf
    methods: tuple[str, ...]
    converters: dict[str, str]  # path parameter -> converter ("int", "slug", "str", "path")


def _walk(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern))
        else:
            yield prefix + str(entry.pattern), entry


def api_endpoints() -> list[Endpoint]:
    endpoints = []
    for route, pattern in _walk(get_resolver().url_patterns):
        if not route.startswith("api/"):
            continue
        view = getattr(pattern.callback, "cls", None)
        methods = tuple(
            method.upper()
            for method in getattr(view, "http_method_names", ["get"])
            if method not in ("options", "head") and hasattr(view or object, method)
        )
        converters = {
            name: kind or "str" for kind, name in re.findall(r"<(?:(\w+):)?(\w+)>", route)
        }
        endpoints.append(Endpoint(route=route, methods=methods or ("GET",), converters=converters))
    return endpoints


def schema_query_parameters(client: Client) -> dict[tuple[str, str], set[str]]:
    """The query parameters the OpenAPI schema names, by (path without converters, method)."""
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    found = {}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
            found[re.sub(r"\{(\w+)\}", r"<\1>", path), method.upper()] = names
    return found


def _path(endpoint: Endpoint, values: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        return quote(values[match.group(1)], safe="")

    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", value, endpoint.route)


def _odd_paths(endpoint: Endpoint, values: dict[str, str]) -> list[str]:
    paths: list[str] = []
    for name, converter in endpoint.converters.items():
        odd = [HUGE_INT] if converter == "int" else [NUL, "x" * 5000]
        paths.extend(_path(endpoint, {**values, name: value}) for value in odd)
    return paths


def _bodies() -> list[tuple[str, bytes]]:
    medium = "[" * MEDIUM + "]" * MEDIUM
    return [
        ("application/json", ("[" * DEEP + "]" * DEEP).encode()),
        ("application/json", ('{"metadata": {"token": ' + medium + "}}").encode()),
        ("application/json", b'{"a": '),
        ("application/json", b"\xff\xfe\x00"),
        ("application/json", b"[]"),
        ("application/json", b"null"),
        ("application/json", b'{"a": NaN, "b": 1' + b"0" * 5000 + b"}"),
        ("application/json", json.dumps({"name": NUL, "reason": NUL, "metadata": NUL}).encode()),
        ("application/json", json.dumps({"card": {"a": [NUL]}, "plan": {NUL: 1}}).encode()),
        ("application/json; charset=bz2_codec", b"{}"),
        ("application/x-www-form-urlencoded", b"name=a%00b&reason=a%00b&action=a%00b"),
        ("multipart/form-data", b"--x\r\n"),
        ("text/plain", b"hello"),
    ]


def test_no_api_path_answers_a_5xx_whatever_it_is_sent(world: dict[str, str], token: str) -> None:
    client = Client(raise_request_exception=False)
    endpoints = api_endpoints()
    assert len(endpoints) >= 25, "the walk found too few API paths"
    documented = schema_query_parameters(client)
    assert "search" in documented["/api/v1/registry/artifacts", "GET"]
    bodies = _bodies()
    failures = []

    def send(
        method: str, path: str, anonymous: bool = False, data: bytes = b"", content_type: str = ""
    ) -> None:
        headers = {} if anonymous else {"authorization": f"Bearer {token}"}
        response = client.generic(
            method, path, data=data, content_type=content_type or None, headers=headers
        )
        if response.status_code >= 500:
            sent = repr(data)[:60]
            failures.append(f"{method} {path[:100]} {sent}: {response.status_code}")

    too_large = b'{"a": "' + b"x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE + b'"}'
    for endpoint in endpoints:
        path = _path(endpoint, world)
        plain = re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", "/" + endpoint.route)
        for method in endpoint.methods:
            for name in documented.get((plain, method), set()):
                for value in (NUL, HUGE_INT, "x" * 300):
                    send(method, f"{path}?{urlencode({name: value})}")
            for name in COMMON_PARAMETERS:
                send(method, f"{path}?{urlencode({name: NUL})}")
            for odd in _odd_paths(endpoint, world):
                send(method, odd)
            if method in ("POST", "PUT", "PATCH"):
                for content_type, data in bodies:
                    send(method, path, data=data, content_type=content_type)
                    send(method, path, anonymous=True, data=data, content_type=content_type)
                send(method, path, data=too_large, content_type="application/json")
                send(method, path, anonymous=True, data=too_large, content_type="application/json")
    assert not failures, "\n".join(failures)


def test_a_nul_in_a_search_is_a_400_that_says_so(
    api_client: APIClient, release_manager: User
) -> None:
    api_client.force_login(release_manager)
    response = api_client.get("/api/v1/registry/artifacts", {"search": NUL})
    assert response.status_code == 400
    assert "NUL character" in response.json()["detail"]


def test_a_nul_in_a_page_path_is_a_400_not_a_database_error(
    client: Client, release_manager: User
) -> None:
    client.force_login(release_manager)
    assert client.get("/registry/support-chat/a%00b/").status_code == 400


def test_a_nul_in_a_json_body_is_a_400_that_says_so(
    api_client: APIClient, release_manager: User
) -> None:
    api_client.force_login(release_manager)
    response = api_client.post(
        "/api/v1/plan-templates",
        {"name": "prod", "description": NUL, "steps": [{"weight": 100}]},
        format="json",
    )
    assert response.status_code == 400
    assert "NUL character" in response.json()["detail"]


def test_a_flagger_call_nested_too_deep_is_a_400_before_authentication(
    api_client: APIClient, db: None
) -> None:
    # The verdict endpoint looks for the token in the body, so the body is parsed first.
    for depth in (MAX_JSON_DEPTH + 1, DEEP):
        body = '{"metadata": {"token": ' + "[" * depth + "]" * depth + "}}"
        response = api_client.post(
            "/api/v1/rollouts/1/verdict", data=body, content_type="application/json"
        )
        assert response.status_code == 400, depth
        assert f"nested deeper than {MAX_JSON_DEPTH} levels" in response.json()["detail"]


def test_a_body_over_the_upload_limit_is_a_413_that_says_so(
    api_client: APIClient, release_manager: User, settings: Settings
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps({"name": "prod", "description": "x" * 1000, "steps": [{"weight": 100}]})
    # Read by the verdict endpoint's authentication, and by a view.
    flagger = api_client.post("/api/v1/rollouts/1/verdict", body, content_type="application/json")
    api_client.force_login(release_manager)
    view = api_client.post("/api/v1/plan-templates", body, content_type="application/json")
    for response in (flagger, view):
        assert response.status_code == 413
        assert "larger than 1000 bytes" in response.json()["detail"]
