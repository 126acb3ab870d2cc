"""Waiting for a rollout or a deployment to settle, and showing it while it does.

On a terminal the reading is one line redrawn in place (a bar of the plan's steps, the canary
weight, the latest reason); in a CI log a redraw is garbage (every carriage return becomes a
line, or none does), so there a plain line is printed each time something changes and nothing
otherwise. Progress goes to stderr: stdout carries what a script captures (an id, the JSON).
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TextIO, TypeVar

import click

from cli.errors import CliError, is_transient

BAR_WIDTH = 20
# A wait outlives the polls that fail on the server's side (a restart, a database that is away
# for seconds): the rollout goes on regardless, and a pipeline that gave up on one failed GET
# would report an outcome it never saw. This many failed polls in a row end the wait, with the
# last error; each one is noted in the log as it happens.
MAX_FAILED_POLLS = 5
DEFAULT_INTERVAL_S = 5.0
DEFAULT_TIMEOUT_S = 3600.0

F = TypeVar("F", bound=Callable[..., Any])


def wait_options(what: str) -> Callable[[F], F]:
    """--wait, --interval and --timeout, the same on every command that can wait."""

    def decorate(function: F) -> F:
        function = click.option(
            "--timeout",
            type=click.FloatRange(min=0),
            default=DEFAULT_TIMEOUT_S,
            show_default=True,
            help="seconds to wait at most; past them the command exits 2 (the work goes on)",
        )(function)
        function = click.option(
            "--interval",
            type=click.FloatRange(min=0.1),
            default=DEFAULT_INTERVAL_S,
            show_default=True,
            help="seconds between polls",
        )(function)
        return click.option(
            "--wait",
            is_flag=True,
            help=f"wait until {what} settles; the exit code then says how",
        )(function)

    return decorate


@dataclass(frozen=True)
class Reading:
    """One poll, as the wait shows and judges it."""

    line: str  # state, step, weight and reason: a change in any is worth a log line
    done: int  # progress for the bar: steps reached of `total`
    total: int
    exit_code: int | None  # None: not settled, keep waiting


class Reporter(Protocol):
    def show(self, reading: Reading, elapsed: float) -> None: ...

    def finish(self) -> None: ...


class LogReporter:
    """A line per change, for CI logs (never a redraw)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.last: str | None = None

    def show(self, reading: Reading, elapsed: float) -> None:
        if reading.line != self.last:
            self.last = reading.line
            click.echo(f"[{_clock(elapsed)}] {reading.line}", file=self.stream)

    def finish(self) -> None:
        pass


class TerminalReporter:
    """One line redrawn in place, cut to the terminal's width so that it never wraps (a wrapped
    line cannot be redrawn with a carriage return)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.drawn = False

    def show(self, reading: Reading, elapsed: float) -> None:
        width = shutil.get_terminal_size((100, 20)).columns - 1
        text = f"{bar(reading.done, reading.total)} {_clock(elapsed)} {reading.line}"
        if len(text) > width:
            text = text[: max(width - 1, 0)] + "…"
        # \r back to the start of the line, ESC[2K erase it: the line is replaced, not appended.
        self.stream.write(f"\r\x1b[2K{text}")
        self.stream.flush()
        self.drawn = True

    def finish(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def bar(done: int, total: int) -> str:
    filled = round(BAR_WIDTH * done / total) if total > 0 else 0
    filled = max(0, min(filled, BAR_WIDTH))
    return "[" + "#" * filled + "-" * (BAR_WIDTH - filled) + "]"


def _clock(elapsed: float) -> str:
    minutes, seconds = divmod(int(elapsed), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


def reporter_for(stream: TextIO) -> Reporter:
    return TerminalReporter(stream) if stream.isatty() else LogReporter(stream)


def wait_until_settled(
    poll: Callable[[], dict[str, Any]],
    read: Callable[[dict[str, Any]], Reading],
    *,
    what: str,
    interval: float,
    timeout: float,
    stream: TextIO | None = None,
) -> tuple[dict[str, Any], int]:
    """Polls until `read` says the object settled; its last state and the exit code.

    Past `timeout` it stops with exit code 2; the rollout itself goes on, only the wait ends.
    """
    out = stream if stream is not None else sys.stderr
    reporter = reporter_for(out)
    started = time.monotonic()
    failed = 0
    try:
        while True:
            try:
                current = poll()
            except CliError as exc:
                failed += 1
                elapsed = time.monotonic() - started
                if not is_transient(exc) or failed >= MAX_FAILED_POLLS or elapsed >= timeout:
                    raise
                reporter.finish()
                click.echo(
                    f"[{_clock(elapsed)}] polling {what} failed ({failed} of "
                    f"{MAX_FAILED_POLLS} in a row), still waiting: {exc.message}",
                    file=out,
                )
                time.sleep(max(0.0, min(interval, timeout - elapsed)))
                continue
            failed = 0
            reading = read(current)
            elapsed = time.monotonic() - started
            reporter.show(reading, elapsed)
            if reading.exit_code is not None:
                return current, reading.exit_code
            if elapsed >= timeout:
                raise CliError(
                    f"gave up waiting after {timeout:g} s: {reading.line}",
                    hint=f"{what} goes on without this wait; wait again, or raise --timeout",
                )
            time.sleep(max(0.0, min(interval, timeout - elapsed)))
    except KeyboardInterrupt:
        reporter.finish()
        click.echo(f"stopped waiting; {what} goes on", err=True)
        raise click.exceptions.Exit(130) from None
    finally:
        # Before any error message, so that it does not land on the end of the redrawn line.
        reporter.finish()
