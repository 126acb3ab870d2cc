"""gunicorn settings for the control plane's web server (values from the environment)."""

import os

from prometheus_client import multiprocess

from controlplane.metrics import process_identifier

bind = f"{os.environ.get('WEB_HOST', '127.0.0.1')}:{os.environ.get('WEB_PORT', '8000')}"
worker_class = "gthread"
workers = int(os.environ.get("WEB_WORKERS", "2"))
threads = int(os.environ.get("WEB_THREADS", "4"))
timeout = 30
graceful_timeout = 10
# Requests are logged as JSON with their request id by RequestMetricsMiddleware.
accesslog = None


def child_exit(server: object, worker: object) -> None:
    # Per-process metric files of a dead worker must be marked so gauges stop counting it.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        pid = process_identifier(worker.pid)  # type: ignore[attr-defined]
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
