"""Worker tests run on the rollouts tests' route and candidate."""

from tests.rollouts.conftest import candidate, route

__all__ = ["candidate", "route"]
