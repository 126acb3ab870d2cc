"""Celery tasks, one module per app. Workers import the apps; the apps never import workers."""
