"""Entry point for Celery's autodiscovery: importing it registers every task module."""

from workers import evaluation, gateway, rollouts, system, usage

__all__ = ["evaluation", "gateway", "rollouts", "system", "usage"]
