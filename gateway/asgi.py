"""Entry point for ASGI servers: `uvicorn --factory gateway.asgi:create_app`."""

from gateway.app import GatewayApp
from gateway.settings import Settings


def create_app() -> GatewayApp:
    return GatewayApp(Settings.from_env())
