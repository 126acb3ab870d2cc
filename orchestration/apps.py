from django.apps import AppConfig


class OrchestrationConfig(AppConfig):
    name = "orchestration"
    verbose_name = "Orchestration"

    def ready(self) -> None:
        # The apps below announce changes through core.publication; this is who publishes.
        from core.publication import register_gateway_snapshot_publisher
        from orchestration.gateway_snapshot import publish_snapshot

        register_gateway_snapshot_publisher(publish_snapshot)
