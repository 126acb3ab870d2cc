"""`python -m gateway`: the OpenAI-compatible gateway (settings from the environment)."""

from __future__ import annotations

import logging
import os
import resource
import shutil
import sys
import tempfile

import uvicorn

from gateway import metrics_listener
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
    # Several workers write their metrics to files for this process's listener to merge: a
    # directory of their own, unless one is given. Set before uvicorn spawns them.
    own_metrics_dir = None
    if settings.workers > 1 and not os.environ.get(metrics_listener.MULTIPROC_DIR):
        own_metrics_dir = tempfile.mkdtemp(prefix="tollgate-gateway-metrics-")
        os.environ[metrics_listener.MULTIPROC_DIR] = own_metrics_dir
    try:
        try:
            metrics_listener.start(settings.metrics_host, settings.metrics_port)
        except OSError as exc:
            print(  # noqa: T201
                f"gateway: GATEWAY_METRICS_PORT: cannot listen on "
                f"{settings.metrics_host}:{settings.metrics_port} ({exc.strerror or exc})",
                file=sys.stderr,
            )
            return 2
        _serve(settings)
    finally:
        if own_metrics_dir is not None:
            shutil.rmtree(own_metrics_dir, ignore_errors=True)
    return 0


def _serve(settings: Settings) -> None:
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
        proxy_headers=False,  # nothing reads the client's address; parsing it costs every request
        log_level="warning",
        backlog=4096,
        # SIGTERM: stop accepting, let in-flight streams finish for up to this long.
        timeout_graceful_shutdown=int(settings.drain_timeout_s),
    )


if __name__ == "__main__":
    sys.exit(main())
