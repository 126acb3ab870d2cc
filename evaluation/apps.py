from django.apps import AppConfig


class EvaluationConfig(AppConfig):
    name = "evaluation"

    def ready(self) -> None:
        # Registers the gateway key's OpenAPI security scheme with drf-spectacular.
        from evaluation import schema  # noqa: F401
