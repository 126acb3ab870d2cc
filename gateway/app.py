"""The gateway's ASGI application: the request path of DESIGN.md, in order.

authenticate → validate → resolve route → choose arm → shed at peak → admit against budgets →
pick a replica → proxy and stream → measure → settle the budget → metrics and a request record.

A bare ASGI application (no framework): this is Tollgate's hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import hashlib
import logging
import os
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import redis.asyncio as redis

from gateway import measure
from gateway.budgets import Budgets, Refusal
from gateway.call import Call
from gateway.errors import GatewayError, bad_request
from gateway.ledger import Ledger, Settlement
from gateway.proxy import SSE_HEADERS, Progress, TotalLate, assemble, first_token_timeout, relay
from gateway.requests import (
    estimate_prompt_tokens,
    parse_body,
    requested_max_tokens,
    system_prefix,
    too_large,
    validate,
)
from gateway.routing import ReplicaLoad, choose_arm, choose_replica, match_rule
from gateway.server import CLIENT_LINE, ClientLine
from gateway.sessions import session_key
from gateway.settings import Settings
from gateway.snapshot import ApiKey, Arm, Route, Snapshot, Tenant
from gateway.store import SnapshotStore
from gateway.tokens import PromptCount, exact_count, prompt_bound
from gateway.tools import ToolChecker
from gateway.upstream import Late, Upstream, UpstreamCutOff, UpstreamFailed
from gateway.watchdog import LoopWatchdog
from gateway.wire import RedisWire

logger = logging.getLogger("gateway")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
JSON = [(b"content-type", b"application/json")]
FORCE_ARM_HEADER = b"x-tollgate-arm"
SESSION_HEADER = b"x-session-id"
# Shedding order at peak: how far past a deployment's limits each tier is still admitted.
SHED_HEADROOM = {"batch": 1.0, "standard": 1.25, "critical": None}


class GatewayApp:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Snapshot reads and the batched after-response writes use a small pool; admission, the
        # one call on a request's path, has its own multiplexed connection (gateway.wire).
        pool = redis.BlockingConnectionPool.from_url(
            settings.redis_url,
            max_connections=8,
            timeout=2.0,
            socket_connect_timeout=0.5,
            socket_timeout=2.0,
        )
        self.redis = redis.Redis(connection_pool=pool)
        self.wire = RedisWire(settings.redis_url, timeout_s=1.0, connect_timeout_s=0.5)
        self.store = SnapshotStore(self.redis, poll_s=settings.snapshot_poll_s)
        self.budgets = Budgets(self.wire)
        self.ledger = Ledger(
            RedisWire(settings.redis_url, timeout_s=2.0, connect_timeout_s=0.5),
            stream=settings.samples_stream,
            max_len=settings.samples_max_len,
        )
        self.upstream = Upstream(connect_timeout_s=settings.connect_timeout_s)
        self.tools = ToolChecker()
        self.load = ReplicaLoad()
        self.watchdog = LoopWatchdog()
        self.in_flight: defaultdict[str, int] = defaultdict(int)  # per deployment

    # --- ASGI ---------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        try:
            if path == "/v1/chat/completions" and method == "POST":
                await self.completion(scope, receive, send, chat=True)
            elif path == "/v1/completions" and method == "POST":
                await self.completion(scope, receive, send, chat=False)
            elif path == "/v1/models" and method == "GET":
                await self.models(scope, send)
            elif path == "/healthz":
                await self._json(send, 200, {"status": "ok"})
            elif path == "/readyz":
                await self.readyz(send)
            else:
                raise GatewayError(404, f"No route for {method} {path}.", code="not_found")
        except GatewayError as error:
            await self._raw(send, error.status, error.body(), error.headers())

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.store.refresh()
                self.store.start()
                self.ledger.start()
                # The ~60,000 objects of the libraries and the snapshot live as long as the
                # process: a full collection that walks them stalls every request for ~15 ms.
                # Frozen, they are never scanned again.
                gc.collect()
                gc.freeze()
                self.watchdog.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.watchdog.stop()
                await self.store.stop()
                await self.ledger.close()
                await self.upstream.close()
                await self.tools.close()
                await self.redis.aclose()
                await self.wire.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    @staticmethod
    async def _raw(
        send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
    ) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _json(self, send: Send, status: int, payload: Any) -> None:
        await self._raw(send, status, orjson.dumps(payload), JSON)

    async def readyz(self, send: Send) -> None:
        snapshot = self.store.current
        body = {
            "status": "ok" if snapshot else "error",
            "snapshot_version": snapshot.version if snapshot else None,
            "redis": "ok" if self.store.redis_ok else "error",
        }
        await self._json(send, 200 if snapshot else 503, body)

    # --- who is asking ------------------------------------------------------------------------

    def _snapshot(self) -> Snapshot:
        snapshot = self.store.current
        if snapshot is None:
            raise GatewayError(
                503, "The gateway has no configuration yet.", error_type="server_error",
                code="not_configured", retry_after_s=5,
            )  # fmt: skip
        return snapshot

    def _authenticate(self, scope: Scope, snapshot: Snapshot) -> tuple[ApiKey, Tenant]:
        header = _header(scope, b"authorization")
        if not header or not header.startswith("Bearer "):
            raise GatewayError(
                401,
                "Missing API key: send 'Authorization: Bearer <tenant API key>'.",
                code="missing_api_key",
            )
        secret = header[7:].strip()
        key = snapshot.keys.get(hashlib.sha256(secret.encode()).hexdigest())
        if key is None:
            raise GatewayError(401, "Incorrect API key provided.", code="invalid_api_key")
        if key.expires_at is not None and key.expires_at <= dt.datetime.now(dt.UTC):
            raise GatewayError(401, f"API key {key.prefix}… has expired.", code="expired_api_key")
        return key, snapshot.tenants[key.tenant_id]

    def _routes_for(self, snapshot: Snapshot, key: ApiKey, tenant: Tenant) -> list[Route]:
        return [
            route
            for route in snapshot.routes.values()
            if (not route.tenant_ids or tenant.id in route.tenant_ids)
            and (not key.allowed_routes or route.name in key.allowed_routes)
        ]

    async def models(self, scope: Scope, send: Send) -> None:
        snapshot = self._snapshot()
        key, tenant = self._authenticate(scope, snapshot)
        data = [
            {"id": route.name, "object": "model", "created": 0, "owned_by": "tollgate"}
            for route in self._routes_for(snapshot, key, tenant)
        ]
        await self._json(send, 200, {"object": "list", "data": data})

    # --- the request path ---------------------------------------------------------------------

    async def completion(self, scope: Scope, receive: Receive, send: Send, *, chat: bool) -> None:
        arrival, started = time.time(), time.monotonic()
        snapshot = self._snapshot()
        key, tenant = self._authenticate(scope, snapshot)
        payload = parse_body(await self._read_body(receive))
        validate(payload, chat=chat)
        route = self._resolve_route(snapshot, key, tenant, payload["model"])
        fallback = self._soft_limit_route(snapshot, tenant) if tenant.over_soft_limit else None
        call = self._plan(
            scope=scope,
            snapshot=snapshot,
            key=key,
            tenant=tenant,
            route=fallback or route,
            payload=payload,
            chat=chat,
            arrival=arrival,
            started=started,
        )
        if tenant.over_soft_limit and fallback is None:
            self._record_rejection(call, 429, "soft_limit")
            raise GatewayError(
                429,
                "This tenant is past the soft limit of its daily or monthly tokens; requests are "
                "refused until usage falls back under it. Ask a tenant admin to raise the budget.",
                error_type="rate_limit_error",
                code="soft_limit",
                retry_after_s=60,
            )
        self._shed_if_saturated(call)
        await self._admit(call)
        progress = Progress()
        line: ClientLine = scope["extensions"][CLIENT_LINE]
        try:
            await self._proxy(call, progress, line, send)
        except GatewayError as error:
            if not line.started:
                progress.status = error.status
                raise  # answered as a JSON error by __call__
            # Mid-stream: the status line is gone; end the stream with an error event.
            progress.finish_reason = "error"
            event = b"data: " + error.body() + b"\n\ndata: [DONE]\n\n"
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": event})
        finally:
            await self._finish(call, progress)

    async def _read_body(self, receive: Receive) -> bytes:
        limit = self.settings.max_body_bytes
        chunks, size = [], 0
        try:
            # A client that trickles its body would otherwise hold the request open for ever.
            async with asyncio.timeout(self.settings.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise GatewayError(499, "The client closed the connection.")
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise too_large(limit)
                    chunks.append(chunk)
                    if not message.get("more_body"):
                        return b"".join(chunks)
        except TimeoutError:
            raise GatewayError(
                408,
                f"The request body did not arrive within {self.settings.body_timeout_s:g} s "
                "(GATEWAY_BODY_TIMEOUT_S).",
                code="request_timeout",
            ) from None

    def _soft_limit_route(self, snapshot: Snapshot, tenant: Tenant) -> Route | None:
        """The cheaper route a tenant past its soft limit is served on, or None to refuse.
        An administrator chose it, so a key's own route list does not apply; the tenant must
        still be allowed on it."""
        fallback = snapshot.routes.get(tenant.budget.soft_limit_route or "")
        if tenant.budget.soft_limit_action != "route" or fallback is None:
            return None
        if fallback.tenant_ids and tenant.id not in fallback.tenant_ids:
            return None
        return fallback

    def _resolve_route(self, snapshot: Snapshot, key: ApiKey, tenant: Tenant, name: str) -> Route:
        route = snapshot.routes.get(name)
        if route is None or route not in self._routes_for(snapshot, key, tenant):
            raise GatewayError(
                404,
                f"The model `{name}` does not exist or you do not have access to it.",
                code="model_not_found",
                param="model",
            )
        return route

    def _plan(
        self,
        *,
        scope: Scope,
        snapshot: Snapshot,
        key: ApiKey,
        tenant: Tenant,
        route: Route,
        payload: dict[str, Any],
        chat: bool,
        arrival: float,
        started: float,
    ) -> Call:
        budget = tenant.budget
        request_id = os.urandom(16).hex()
        rough = estimate_prompt_tokens(payload, chat=chat)
        # A route rule takes the request out of the split (see gateway.routing); a forced arm
        # chooses between baseline and canary only for requests no rule claims.
        arm = match_rule(route, tenant, rough) or self._choose_arm(
            scope, key, tenant, route, payload, request_id
        )
        deployment = snapshot.deployments[arm.deployment_id]
        tokenizer = self.store.tokenizer(deployment.tokenizer_dir)
        counted = prompt_bound(payload, chat=chat, max_model_len=deployment.max_model_len)

        def exactly() -> PromptCount:
            return exact_count(payload, chat=chat, tokenizer=tokenizer, bound=counted) or counted

        limit = budget.max_context_tokens
        if limit is not None and counted.tokens > limit:
            counted = exactly()
            # A limit that refuses reads the best count there is; a bound would refuse prompts
            # that fit.
            prompt = counted.tokens if counted.exact else rough
            if prompt > limit:
                about = "" if counted.exact else "about "
                raise bad_request(
                    f"The prompt is {about}{prompt} tokens; this tenant's limit is {limit} "
                    "(max_context_tokens).",
                    param="messages" if chat else "prompt",
                    code="context_length_exceeded",
                )
        asked = requested_max_tokens(payload)
        allowance = asked if asked is not None else budget.default_output_allowance
        if budget.max_output_tokens is not None and allowance > budget.max_output_tokens:
            if asked is not None and budget.over_max_output == "reject":
                raise bad_request(
                    f"max_tokens={asked} is above this tenant's limit of "
                    f"{budget.max_output_tokens} output tokens (max_output_tokens).",
                    param="max_tokens",
                )
            allowance = budget.max_output_tokens
        send_max_tokens = True
        if asked is None and deployment.max_model_len is not None:
            if counted.tokens + allowance > deployment.max_model_len:
                counted = exactly()
            # Unasked, the allowance must fit the model's context beside the prompt, or the
            # replica refuses a max_tokens the client never sent. The count is exact or a bound
            # above the real one, so the room it leaves is there.
            room = deployment.max_model_len - counted.tokens
            if room >= 1:
                allowance = min(allowance, room)
            elif not counted.exact:
                # The bound leaves no room but the prompt may fit: the replica is asked with no
                # max_tokens, so it fills in exactly what is left, and the reservation covers
                # the most it can be.
                send_max_tokens = False
                allowance = deployment.max_model_len
            else:
                raise bad_request(
                    f"The prompt is {counted.tokens} tokens; the model's context is "
                    f"{deployment.max_model_len} tokens.",
                    param="messages" if chat else "prompt",
                    code="context_length_exceeded",
                )
        options = payload.get("stream_options") or {}
        return Call(
            request_id=request_id,
            arrival=arrival,
            started=started,
            chat=chat,
            payload=payload,
            tenant=tenant,
            route=route,
            arm=arm,
            deployment=deployment,
            key_id=key.id,
            prompt_estimate=counted.tokens if counted.exact else rough,
            prompt_reserved=counted.tokens,
            prompt_size=rough,
            send_max_tokens=send_max_tokens,
            allowance=allowance,
            client_streams=bool(payload.get("stream")),
            client_wants_usage=bool(options.get("include_usage")),
            concurrency=self.in_flight[deployment.id],
        )

    def _choose_arm(
        self,
        scope: Scope,
        key: ApiKey,
        tenant: Tenant,
        route: Route,
        payload: dict[str, Any],
        request_id: str,
    ) -> Arm:
        forced = _header(scope, FORCE_ARM_HEADER)
        if forced:
            if not key.can_force_arm:
                raise GatewayError(
                    403,
                    "This API key may not choose an arm (X-Tollgate-Arm).",
                    code="arm_forcing_not_allowed",
                )
            arm = next((a for a in route.arms if a.name == forced), None)
            if arm is None:
                names = ", ".join(a.name for a in route.arms)
                raise bad_request(f"X-Tollgate-Arm must be one of: {names}.", code="unknown_arm")
            return arm
        session = session_key(
            stickiness=route.stickiness,
            payload=payload,
            session_header=_header(scope, SESSION_HEADER),
            request_id=request_id,
        )
        return choose_arm(route, f"{tenant.id}\0{session or tenant.id}")

    def _shed_if_saturated(self, call: Call) -> None:
        headroom = SHED_HEADROOM[call.tenant.tier]
        if headroom is None:
            return  # the top tier is never shed by the gateway
        dep = call.deployment
        healthy = sum(1 for r in dep.replicas if r.healthy) or 1
        pressure = max(
            dep.kv_cache_usage / dep.max_kv_cache_usage,
            dep.waiting_requests / max(1, dep.max_waiting_requests),
            self.in_flight[dep.id] / (dep.max_in_flight_per_replica * healthy),
        )
        if pressure >= headroom:
            self._record_rejection(call, 503, "shed")
            raise GatewayError(
                503,
                f"The model is at capacity; {call.tenant.tier}-tier traffic is shed first. "
                "Retry shortly.",
                error_type="server_error",
                code="overloaded",
                retry_after_s=2,
            )

    async def _admit(self, call: Call) -> None:
        reservation = self.budgets.reservation(
            tenant_id=call.tenant.id,
            budget=call.tenant.budget,
            request_id=call.request_id,
            prompt_tokens=self._prompt_to_reserve(call),
            output_allowance=call.allowance,
        )
        try:
            result = await self.budgets.admit(
                reservation,
                budget=call.tenant.budget,
                deadline_s=self.settings.total_timeout_s + 60,
            )
        except (redis.RedisError, OSError) as exc:
            # The reply may be lost after Redis ran the script (a timeout): the request may hold
            # the reservation. Settling it anyway, with what the request uses (nothing, when it is
            # refused), frees it if it exists and charges the usage once either way.
            if call.tenant.fail_mode == "open":
                logger.warning("budget store away (%r): %s fails open", exc, call.tenant.slug)
                call.reservation = reservation
                return
            self._record_rejection(call, 503, "budget_store", Settlement(reservation, 0, 0))
            raise GatewayError(
                503,
                "Budgets cannot be checked right now and this tenant fails closed. Retry shortly.",
                error_type="server_error",
                code="budget_store_unavailable",
                retry_after_s=5,
            ) from exc
        if isinstance(result, Refusal):
            self._record_rejection(call, 429, result.limit)
            raise GatewayError(
                429,
                f"Rate limit reached for this tenant: {result.limit.replace('_', ' ')}. "
                f"Retry after {result.retry_after_s} s.",
                error_type="rate_limit_error",
                code=result.limit,
                retry_after_s=result.retry_after_s,
            )
        call.reservation = result

    @staticmethod
    def _prompt_to_reserve(call: Call) -> int:
        """The prompt's count, or bound, but never more than the tenant's input tokens a minute:
        a bound above that would refuse for ever a prompt whose real count may fit (one whose
        real count does not is then charged in full at settlement, and the limiter waits)."""
        limit = call.tenant.budget.input_tokens_per_minute
        return call.prompt_reserved if limit is None else min(call.prompt_reserved, limit)

    def _upstream_body(self, call: Call) -> bytes:
        payload = dict(call.payload)
        payload["model"] = call.deployment.served_model_name
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
        payload.pop("max_completion_tokens", None)
        if call.send_max_tokens:
            payload["max_tokens"] = call.allowance
        else:
            payload.pop("max_tokens", None)
        return orjson.dumps(payload)

    async def _proxy(self, call: Call, progress: Progress, line: ClientLine, send: Send) -> None:
        if line.gone:
            progress.client_left = True
            return
        task = asyncio.current_task()

        def client_gone() -> None:
            # Cancelling closes the upstream connection, which makes vLLM abort the request;
            # what was generated until then is still charged.
            progress.client_left = True
            if task is not None:
                task.cancel()

        line.on_gone = client_gone
        self.in_flight[call.deployment.id] += 1
        measure.IN_FLIGHT.inc()
        try:
            await self._forward(call, self._upstream_body(call), progress, line)
        except asyncio.CancelledError:
            if task is None or not progress.client_left or task.uncancel() > 0:
                raise  # cancelled for another reason (the server stopping)
            return
        finally:
            line.on_gone = line.on_writable = None
            self.in_flight[call.deployment.id] -= 1
            measure.IN_FLIGHT.dec()
        await self._answer(call, progress, line, send)

    async def _forward(self, call: Call, body: bytes, progress: Progress, line: ClientLine) -> None:
        tried: set[str] = set()
        failure = "no healthy replica"
        tokens = call.prompt_estimate + call.allowance
        prefix = system_prefix(call.payload) if call.chat else None
        measure.OVERHEAD.observe(time.monotonic() - call.started)
        # One first-token deadline for the request, retries included (connect, headers, event),
        # and one for the whole of it.
        now = asyncio.get_running_loop().time()
        first_token_by = now + self.settings.first_token_timeout_s
        total_by = now + self.settings.total_timeout_s
        # Retry once on another replica, and only while nothing was sent to the client.
        for _ in range(2):
            replica = choose_replica(
                call.deployment, self.load, prefix=prefix, exclude=frozenset(tried)
            )
            if replica is None:
                break
            tried.add(replica.id)
            call.replica_id = replica.id
            self.load.add(replica.id, tokens)
            try:
                response = await self.upstream.open(
                    replica.base_url.rstrip("/")
                    + ("/v1/chat/completions" if call.chat else "/v1/completions"),
                    body,
                    deadline=min(first_token_by, total_by),
                )
            except Late:
                self.load.remove(replica.id, tokens)
                raise first_token_timeout() from None
            except UpstreamFailed as exc:
                self.load.remove(replica.id, tokens)
                failure = f"{replica.id}: {exc}"
                continue
            try:
                await relay(
                    response,
                    progress,
                    line,
                    client_streams=call.client_streams,
                    client_wants_usage=call.client_wants_usage,
                    served_model=call.deployment.served_model_name,
                    public_model=call.route.name,
                    first_token_by=first_token_by,
                    total_by=total_by,
                )
            except Late:
                raise first_token_timeout() from None
            except TotalLate:
                progress.finish_reason = "error"
                raise GatewayError(
                    504,
                    f"The request ran past {self.settings.total_timeout_s:g} s.",
                    error_type="timeout",
                    code="total_timeout",
                ) from None
            except UpstreamCutOff as exc:
                # Too late to retry elsewhere: part of the answer may already be with the client.
                progress.finish_reason = "error"
                raise GatewayError(
                    502,
                    f"Replica {replica.id} stopped in the middle of the answer ({exc}); the "
                    f"{progress.token_events} tokens it produced are charged.",
                    error_type="server_error",
                    code="upstream_failed",
                ) from None
            finally:
                self.load.remove(replica.id, tokens)
                # A finished response's connection is kept already; anything else is closed
                # here, and the replica sees the disconnect and aborts.
                response.finish()
            return
        raise GatewayError(
            502,
            f"No replica of deployment {call.deployment.id} could answer ({failure}).",
            error_type="server_error",
            code="upstream_unavailable",
        )

    async def _answer(self, call: Call, progress: Progress, line: ClientLine, send: Send) -> None:
        if progress.error_body is not None:
            # The replica refused the request (a 4xx in the same envelope): pass it on.
            await self._raw(send, progress.status, progress.error_body, JSON)
            return
        if call.client_streams:
            if not line.started:
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": b""})
            return
        answer = assemble(progress, chat=call.chat, public_model=call.route.name)
        await self._json(send, 200, answer)

    # --- after the response -------------------------------------------------------------------

    def _record_rejection(
        self, call: Call, status: int, reason: str, settlement: Settlement | None = None
    ) -> None:
        """Counts a refusal and records it on the samples stream, so that usage accounting and
        the judge see rejections by reason and by arm."""
        measure.REJECTIONS.labels(call.route.name, call.tenant.slug, reason).inc()
        self.ledger.record(settlement, call.rejection(status, reason))

    async def _finish(self, call: Call, progress: Progress) -> None:
        """Settles and records the request, whatever checking its tool calls does: a request
        whose check fails or is cancelled is recorded with the tool outcome `unchecked`."""
        tools = call.payload.get("tools")
        outcome = None
        if tools and progress.status == 200 and not progress.client_left:
            outcome = "unchecked"
            try:
                calls = [c for _, c in sorted(progress.tool_calls.items())]
                outcome = await self.tools.outcome(tools, calls)
            finally:
                self._record(call, progress, outcome)
        else:
            self._record(call, progress, outcome)

    def _record(self, call: Call, progress: Progress, tool: str | None) -> None:
        settlement, sample = call.outcome(progress, tool)
        measure.observe(sample)
        self.ledger.record(settlement, sample)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None
