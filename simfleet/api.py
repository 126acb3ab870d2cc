"""The HTTP face of a replica: vLLM's OpenAI-compatible API, /health, /metrics, admin endpoints.

A bare ASGI application (no framework): at thousands of concurrent streams every microsecond per
token counts, and the routes are few. What a completion request and its answer look like on the
wire is in `completions.py`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from simfleet.asgi import (
    JSON_HEADERS,
    ApiError,
    Receive,
    Scope,
    Send,
    parse_json,
    read_body,
    respond,
    respond_json,
)
from simfleet.completions import chat_completion, text_completion
from simfleet.profiles import Faults
from simfleet.replica import AdapterError, Replica


class ReplicaApp:
    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.routes: dict[tuple[str, str], Callable[[Scope, Receive, Send], Awaitable[None]]] = {
            ("GET", "/health"): self.health,
            ("GET", "/ping"): self.health,
            ("POST", "/ping"): self.health,
            ("GET", "/metrics"): self.metrics,
            ("GET", "/v1/models"): self.models,
            ("POST", "/v1/chat/completions"): self.chat_completions,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/v1/load_lora_adapter"): self.load_lora_adapter,
            ("POST", "/v1/unload_lora_adapter"): self.unload_lora_adapter,
            ("GET", "/admin/faults"): self.get_faults,
            ("POST", "/admin/faults"): self.update_faults,
            ("DELETE", "/admin/faults"): self.reset_faults,
            ("POST", "/admin/oom"): self.trigger_oom,
            ("POST", "/admin/restart"): self.restart,
            ("GET", "/admin/state"): self.state,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        handler = self.routes.get((scope["method"], scope["path"]))
        try:
            if handler is None:
                known = any(path == scope["path"] for _, path in self.routes)
                if known:
                    raise ApiError(405, "Method Not Allowed", "MethodNotAllowed")
                raise ApiError(404, "Not Found", "NotFoundError")
            await handler(scope, receive, send)
        except ApiError as error:
            await respond(send, error.status, error.body(), JSON_HEADERS)
        except ConnectionAbortedError:
            pass  # the client left before we answered: nothing to answer

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.replica.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.replica.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # --- health, metrics, models --------------------------------------------------------------

    async def health(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200 if self.replica.healthy else 503, b"", [])

    async def metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        replica = self.replica
        adapters = replica.adapters
        engines = replica.engines.values()
        running = {r.model for e in engines for r in e.running if r.model in adapters}
        waiting = {r.model for e in engines for r in e.waiting if r.model in adapters}
        max_loras = max((m.max_loras for m in replica.spec.models), default=0)
        replica.metrics.set_lora_info(
            max_loras=max_loras, waiting=sorted(waiting), running=sorted(running)
        )
        body = generate_latest(replica.metrics.registry)
        await respond(send, 200, body, [(b"content-type", CONTENT_TYPE_LATEST.encode())])

    async def models(self, scope: Scope, receive: Receive, send: Send) -> None:
        data: list[dict[str, Any]] = [
            {
                "id": served.name,
                "object": "model",
                "created": self.replica.created,
                "owned_by": "vllm",
                "root": served.root,
                "parent": served.parent,
                "max_model_len": served.base.max_model_len,
                "permission": [],
            }
            for served in self.replica.served_models()
        ]
        await respond_json(send, 200, {"object": "list", "data": data})

    # --- LoRA ---------------------------------------------------------------------------------

    async def load_lora_adapter(self, scope: Scope, receive: Receive, send: Send) -> None:
        payload = parse_json(await read_body(receive))
        name, path = payload.get("lora_name"), payload.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
            raise ApiError(400, "Both 'lora_name' and 'lora_path' must be provided.")
        try:
            self.replica.load_adapter(name, path)
        except AdapterError as error:
            raise ApiError(error.status, str(error), error.error_type) from error
        message = f"Success: LoRA adapter '{name}' added successfully."
        await respond(send, 200, message.encode(), [(b"content-type", b"text/plain")])

    async def unload_lora_adapter(self, scope: Scope, receive: Receive, send: Send) -> None:
        payload = parse_json(await read_body(receive))
        name = payload.get("lora_name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "'lora_name' needs to be provided to unload a LoRA adapter.")
        try:
            self.replica.unload_adapter(name)
        except AdapterError as error:
            raise ApiError(error.status, str(error), error.error_type) from error
        message = f"Success: LoRA adapter '{name}' removed successfully."
        await respond(send, 200, message.encode(), [(b"content-type", b"text/plain")])

    # --- admin: faults ------------------------------------------------------------------------

    async def get_faults(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond_json(send, 200, self.replica.faults.model_dump())

    async def update_faults(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Merges the given fields into the current faults; unknown fields are a 400."""
        changes = parse_json(await read_body(receive))
        try:
            faults = Faults.model_validate({**self.replica.faults.model_dump(), **changes})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise ApiError(400, f"Invalid faults: {problems}") from exc
        self.replica.set_faults(faults)
        await respond_json(send, 200, faults.model_dump())

    async def reset_faults(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.replica.set_faults(self.replica.spec.faults)
        await respond_json(send, 200, self.replica.faults.model_dump())

    async def trigger_oom(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.replica.oom()
        await respond_json(send, 200, {"status": "dead", "reason": self.replica.dead_reason})

    async def restart(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.replica.restart()
        warmup = self.replica.faults.restart_warmup_s
        await respond_json(send, 200, {"status": "warming_up", "healthy_in_s": warmup})

    async def state(self, scope: Scope, receive: Receive, send: Send) -> None:
        engines = {
            name: {
                "running": len(e.running),
                "waiting": len(e.waiting),
                "kv_used_tokens": e.kv_used,
                "kv_capacity_tokens": e.kv_capacity,
            }
            for name, e in self.replica.engines.items()
        }
        body = {
            "healthy": self.replica.healthy,
            "engines": engines,
            "adapters": list(self.replica.adapters),
        }
        await respond_json(send, 200, body)

    # --- completions --------------------------------------------------------------------------

    async def chat_completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        payload = parse_json(await read_body(receive))
        await chat_completion(self.replica, payload).run(receive, send)

    async def completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        payload = parse_json(await read_body(receive))
        await text_completion(self.replica, payload).run(receive, send)
