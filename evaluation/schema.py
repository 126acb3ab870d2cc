"""How the gateway key that applications send feedback with appears in the OpenAPI schema."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class GatewayKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "evaluation.api.authentication.GatewayKeyAuthentication"
    name = "gatewayKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A tenant's gateway key (tk_…), the one the application sends its "
            "requests with; it may rate its own tenant's responses only.",
        }
