"""Keeps the suite inside its checkout: a test that opens or lists a path beside it fails.

A user's clone has nothing next to it, so a test that reads `../something` passes on the machine
it was written on and fails everywhere else. An audit hook (PEP 578) sees every `open`,
`os.listdir` and `os.scandir` of the test process, and refuses a path that lies in the checkout's
parent folder but not in the checkout itself, the temporary folder or the Python installation.
Processes the tests start (gateways, simfleet) are not watched; CI runs the suite from a clone
with nothing beside it for those.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

EVENTS = frozenset({"open", "os.listdir", "os.scandir"})


class OutsideCheckoutError(PermissionError):
    """A test reached a path beside the checkout, which a user's clone does not have."""


def escapes(path: str, *, root: str, allowed: tuple[str, ...]) -> bool:
    """Whether `path` lies beside `root` (in its parent folder) and in none of `allowed`."""
    parent = os.path.dirname(root)
    inside = (root, *allowed)
    beside = path == parent or path.startswith(parent + os.sep)
    return beside and not any(path == place or path.startswith(place + os.sep) for place in inside)


def install(root: Path) -> None:
    """Refuse, from now on in this process, every open or listing of a path beside `root`."""
    root_text = str(root.resolve())
    if os.path.dirname(root_text) == os.sep:
        return  # a checkout at the top of the file system has no "beside"
    parent = Path(root_text).parent
    places = {Path(p).resolve() for p in (tempfile.gettempdir(), sys.prefix, sys.base_prefix)}
    # A place that holds the checkout's parent (a clone in a fresh temporary folder) would allow
    # everything beside it; it stays allowed only when it is that parent itself.
    allowed = tuple(
        str(place) for place in places if place == parent or not parent.is_relative_to(place)
    )

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event not in EVENTS or not args or isinstance(args[0], int) or args[0] is None:
            return
        path = os.path.abspath(os.fsdecode(args[0]))
        if escapes(path, root=root_text, allowed=allowed):
            raise OutsideCheckoutError(
                f"a test reached outside the checkout ({path}): a user's clone has nothing "
                f"beside it; keep test data under {root_text}"
            )

    sys.addaudithook(hook)
