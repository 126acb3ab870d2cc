"""Tollgate's control plane: Django project settings, URLs, the Celery app and shared plumbing."""

from controlplane.celery import app as celery_app

__all__ = ["celery_app"]
