"""Entry point for Celery's autodiscovery: importing it registers every task module."""

from workers import system

__all__ = ["system"]
