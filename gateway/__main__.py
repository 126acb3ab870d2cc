"""`python -m gateway`: the OpenAI-compatible gateway (settings from the environment)."""

from __future__ import annotations

import logging
import resource
import sys

import uvicorn

from gateway.settings import Settings, SettingsError


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"gateway: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    # Every client stream and every upstream stream is a socket.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    uvicorn.run(
        "gateway.asgi:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        loop="uvloop",
        http="gateway.server:GuardedHttpToolsProtocol",  # slow-client guards
        lifespan="on",
        access_log=False,
        log_level="warning",
        backlog=4096,
        # SIGTERM: stop accepting, let in-flight streams finish for up to this long.
        timeout_graceful_shutdown=int(settings.drain_timeout_s),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
