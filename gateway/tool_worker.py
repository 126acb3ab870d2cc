"""`python -m gateway.tool_worker`: validates tool-call arguments against tenants' schemas.

Tool schemas are tenant input, so they are checked here, in a child process of the gateway, and
never on the event loop that serves every tenant. A schema cannot make this process open a
connection (a `$ref` to anything outside the schema is refused, not fetched), a check runs at most
CHECK_DEADLINE_S (a catastrophic `pattern` is interrupted: Python's regex engine checks for
signals), and the process's memory is capped. What could not be checked is `unchecked`.

Protocol, one JSON array a line: in `[id, [[schema, arguments], ...]]` (the schema as JSON text,
the arguments as the model wrote them); out `[id, outcome]` with outcome `valid`,
`invalid_schema` or `unchecked`.
"""

from __future__ import annotations

import resource
import signal
import sys
from functools import lru_cache
from types import FrameType
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry, Resource

CHECK_DEADLINE_S = 0.1
MEMORY_BYTES = 1024 * 1024 * 1024


class Deadline(Exception):
    """The check ran past CHECK_DEADLINE_S."""


class RemoteReference(Exception):
    """A schema referred to a document outside itself; nothing is fetched."""


def _refuse(uri: str) -> Resource[Any]:
    raise RemoteReference(uri)


# An empty registry that refuses every lookup: jsonschema's default one fetches remote `$ref`s.
NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_refuse)  # type: ignore[call-arg]


@lru_cache(maxsize=1024)
def _validator(schema_json: str) -> Draft202012Validator | None:
    try:
        schema = orjson.loads(schema_json)
        Draft202012Validator.check_schema(schema)
    except (orjson.JSONDecodeError, SchemaError):
        return None
    return Draft202012Validator(schema, registry=NO_RETRIEVAL)


def outcome(pairs: list[list[str]]) -> str:
    """valid, invalid_schema, or unchecked when a schema is unusable or a check failed."""
    for schema_json, arguments in pairs:
        validator = _validator(schema_json)
        if validator is None:
            return "unchecked"  # not a schema: nothing to validate against
        if not validator.is_valid(orjson.loads(arguments)):
            return "invalid_schema"
    return "valid"


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Deadline


def serve() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the gateway stops this process itself
    for line in sys.stdin.buffer:
        request_id, pairs = orjson.loads(line)
        try:
            signal.setitimer(signal.ITIMER_REAL, CHECK_DEADLINE_S)
            try:
                result = outcome(pairs)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        # Whatever a hostile schema makes jsonschema raise (a refused or unresolvable reference,
        # recursion, memory, the deadline), the answer is the same: it could not be checked.
        except Exception:  # noqa: BLE001
            result = "unchecked"
        sys.stdout.buffer.write(orjson.dumps([request_id, result]) + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    serve()
