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


class FlaggerMetadataTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "evaluation.api.authentication.FlaggerMetadataTokenAuthentication"
    name = "flaggerMetadataToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        # OpenAPI has no scheme for a credential inside the body; described as an API key.
        return {
            "type": "apiKey",
            "in": "header",
            "name": "X-Unused",
            "description": "Flagger webhooks only: an API token (tg_…) in the POSTed payload's "
            "`metadata.token`, since Flagger cannot set headers.",
        }
