"""How the CLI fails: a message for the person reading the log and an exit code for the pipeline.

The exit codes are the CLI's contract with CI scripts, so they live in one place:

- 0: the command did what was asked (for a rollout waited on: it was promoted);
- 1: the rollout was rolled back, aborted or failed; the deployment failed;
- 2: a usage or API error: no URL or token, a bad token, a 4xx, an unreachable server, a timeout;
- 3: the rollout is held for a person (paused): a pipeline cannot decide it, so it stops waiting.
"""

from __future__ import annotations

import click

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2
EXIT_HELD = 3


class CliError(click.ClickException):
    """A failure the person can fix: what went wrong, then what to do about it.

    Click prints it on stderr as `Error: <message>` and exits with `exit_code`.
    """

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def format_message(self) -> str:
        if self.hint:
            return f"{self.message}\n  fix: {self.hint}"
        return self.message


class ApiError(CliError):
    """The API answered with an error (a 4xx, or a 5xx that outlasted the retries)."""

    def __init__(self, message: str, *, status: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


class Unreachable(CliError):
    """The control plane could not be reached (refused, reset, timed out) within the retries."""


def is_transient(exc: CliError) -> bool:
    """Whether asking again later may succeed: the server was away, or failed on its side.
    A 4xx (a bad token, a rollout that does not exist) will answer the same every time."""
    return isinstance(exc, Unreachable) or (isinstance(exc, ApiError) and exc.status >= 500)
