"""`tollgate`: the command-line client that CI pipelines use to drive the control plane.

A pure HTTP client of the REST API (/api/v1/): it imports neither Django nor any of the project's
apps, so a CI runner needs only the project installed, not its settings, database or services.
The import-linter contract in pyproject.toml keeps it that way.
"""
