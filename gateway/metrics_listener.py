"""The gateway's Prometheus metrics, served on a listener of their own (`GATEWAY_METRICS_PORT`).

The metrics are labelled by tenant, so whoever reads them learns every tenant's name and traffic.
They are not on the port tenants use (there `/metrics` is a 404), and the listener binds to
127.0.0.1 unless `GATEWAY_METRICS_HOST` says otherwise, for Prometheus to reach on a network of
its own.

One listener per gateway, whatever `GATEWAY_WORKERS` says: it runs in the process started as
`python -m gateway` (a thread of prometheus_client's), which with several workers is uvicorn's
supervisor, and then reads the workers' values from `PROMETHEUS_MULTIPROC_DIR`. With one worker
that same process serves requests, and a scrape takes the GIL from its loop in 5 ms slices instead
of stopping it for a whole scrape, as `/metrics` on the loop did.
"""

from __future__ import annotations

import os
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, multiprocess, start_http_server

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"


def start(host: str, port: int) -> tuple[WSGIServer, threading.Thread]:
    """Starts serving the metrics on a daemon thread; raises OSError when the port is taken."""
    directory = os.environ.get(MULTIPROC_DIR)
    registry = REGISTRY
    if directory:
        # Read at every scrape: the files of every worker, this process's own included.
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return start_http_server(port, addr=host, registry=registry)
