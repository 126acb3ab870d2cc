"""Entry point for ASGI servers: `uvicorn --factory gateway.asgi:create_app`.

Run this way, the gateway serves no metrics: their listener (gateway.metrics_listener) is started
by `python -m gateway`, once for all its workers.
"""

from gateway.app import GatewayApp
from gateway.settings import Settings


def create_app() -> GatewayApp:
    return GatewayApp(Settings.from_env())
