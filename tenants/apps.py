from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"

    def ready(self) -> None:
        # Registers the bearer-token scheme with drf-spectacular.
        from tenants import schema  # noqa: F401
