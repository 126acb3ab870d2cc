"""Did the model call a tool, and can the tool accept the arguments it wrote?

What can be told without the tenant's schema is told here: no call, arguments that are not JSON,
a call to a tool that was not offered. Checking arguments against a schema runs in a child
process (gateway.tool_worker), because the schema is the tenant's: it may refer to remote
documents or hold a catastrophic pattern, and the event loop serves every tenant. The answer is
awaited with a deadline; whatever happens to the check, the caller gets an outcome (`unchecked`
when there is none) and the request is recorded and settled regardless.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
import time
from typing import Any, cast

import orjson

logger = logging.getLogger("gateway.tools")

# Schemas larger than this are not checked: the body limit bounds them, this bounds the work.
MAX_SCHEMA_BYTES = 64 * 1024
# A check waits at most this long for the worker (its own deadline is far shorter); a worker that
# has not answered its oldest request in this time is stuck and is replaced.
WAIT_S = 2.0
MAX_PENDING = 1000


def quick_outcome(
    tools: list[dict[str, Any]], calls: list[dict[str, str]]
) -> str | list[list[str]]:
    """The outcome when no schema is needed (no_call, invalid_json, invalid_schema for a tool
    that was not offered, unchecked when the schemas are too large), else the (schema,
    arguments) pairs to check."""
    if not calls:
        return "no_call"
    schemas: dict[str, Any] = {}
    for tool in tools:
        function = tool["function"]
        schemas[str(function["name"])] = function.get("parameters") or {"type": "object"}
    pairs: list[list[str]] = []
    size = 0
    for call in calls:
        try:
            orjson.loads(call["arguments"] or "")
        except orjson.JSONDecodeError:
            return "invalid_json"
        schema = schemas.get(call["name"])
        if schema is None:
            return "invalid_schema"  # a tool that was not offered
        schema_json = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS).decode()
        size += len(schema_json)
        pairs.append([schema_json, call["arguments"]])
    return "unchecked" if size > MAX_SCHEMA_BYTES else pairs


class ToolChecker:
    """Checks tool-call arguments in one long-lived worker process, restarted when it dies or
    sticks. Requests are answered in order; a stuck check holds the ones behind it for at most
    WAIT_S, after which they are `unchecked` too (a tenant can cost others a measurement, never a
    request)."""

    def __init__(self) -> None:
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[float, asyncio.Future[str]]] = {}
        self._ids = itertools.count()
        self._starting: asyncio.Lock | None = None
        self._reaping: asyncio.Task[int] | None = None  # a killed worker, waited for

    async def outcome(self, tools: list[dict[str, Any]], calls: list[dict[str, str]]) -> str:
        quick = quick_outcome(tools, calls)
        if isinstance(quick, str):
            return quick
        if len(self._pending) >= MAX_PENDING:
            return "unchecked"
        try:
            stdin = cast(asyncio.StreamWriter, (await self._worker()).stdin)  # piped: never None
            request_id = next(self._ids)
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            self._pending[request_id] = (time.monotonic(), future)
            stdin.write(orjson.dumps([request_id, quick]) + b"\n")
            await stdin.drain()
            return await asyncio.wait_for(asyncio.shield(future), WAIT_S)
        except (TimeoutError, OSError, ConnectionError):
            self._replace_if_stuck()
            return "unchecked"

    async def close(self) -> None:
        self._stop("the gateway is stopping")
        if self._reaping is not None:
            await self._reaping

    async def _worker(self) -> asyncio.subprocess.Process:
        if self._process is not None and self._process.returncode is None:
            return self._process
        self._starting = self._starting or asyncio.Lock()
        async with self._starting:
            if self._process is None or self._process.returncode is not None:
                self._stop("the worker exited")
                self._process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "gateway.tool_worker",
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
                self._reader = asyncio.get_running_loop().create_task(self._read(self._process))
        return self._process

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        stdout = cast(asyncio.StreamReader, process.stdout)  # piped: never None
        while line := await stdout.readline():
            request_id, result = orjson.loads(line)
            entry = self._pending.pop(request_id, None)
            if entry is not None and not entry[1].done():
                entry[1].set_result(result)

    def _replace_if_stuck(self) -> None:
        oldest = min((since for since, _ in self._pending.values()), default=None)
        if oldest is not None and time.monotonic() - oldest >= WAIT_S:
            logger.warning("the tool-schema worker is stuck: replacing it")
            self._stop("the worker was stuck")

    def _stop(self, why: str) -> None:
        for _, future in self._pending.values():
            if not future.done():
                future.set_result("unchecked")
        self._pending.clear()
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None
        if self._process is not None:
            if self._process.stdin is not None:
                self._process.stdin.close()
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            self._reaping = asyncio.get_running_loop().create_task(self._process.wait())
            logger.info("tool-schema worker stopped: %s", why)
        self._process = None
