"""Entry point for Celery's autodiscovery: importing it registers every task module."""

from workers import gateway, system

__all__ = ["gateway", "system"]
