"""Runs every replica of a fleet in one process: one uvicorn server per port, one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Generator

import uvicorn

from simfleet.api import ReplicaApp
from simfleet.profiles import FleetConfig
from simfleet.replica import Replica

logger = logging.getLogger("simfleet")


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to the fleet (several share one loop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None]:
        yield


def build_replicas(config: FleetConfig) -> list[Replica]:
    return [
        Replica(spec, index=index, seed=config.seed) for index, spec in enumerate(config.replicas)
    ]


async def serve(config: FleetConfig, *, ready: asyncio.Event | None = None) -> None:
    replicas = build_replicas(config)
    servers = [
        _Server(
            uvicorn.Config(
                ReplicaApp(replica),
                host=config.host,
                port=replica.spec.port,
                loop="none",
                http="httptools",
                lifespan="on",
                access_log=False,
                log_level="warning",
                # Thousands of concurrent streams per replica are the point of simfleet.
                backlog=4096,
                timeout_keep_alive=30,
            )
        )
        for replica in replicas
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(server.serve()) for server in servers]
    while not all(server.started for server in servers):
        if any(task.done() for task in tasks):
            break  # a port could not be bound; its task holds the error
        await asyncio.sleep(0.05)
    failed = [task for task in tasks if task.done()]
    if not failed:
        ports = ", ".join(str(r.spec.port) for r in replicas)
        logger.warning(
            "simfleet: %d replica(s) serving on %s:%s", len(replicas), config.host, ports
        )
        if ready is not None:
            ready.set()
        await stop.wait()
    for server in servers:
        server.should_exit = True
    await asyncio.gather(*tasks, return_exceptions=True)
    if failed or any(not server.started for server in servers):
        raise OSError(f"simfleet could not listen on every port of {config.host}")
