"""The suite may read only its own checkout (see tests/checkout_guard.py)."""

from __future__ import annotations

import os
import tempfile

import pytest

from tests.checkout_guard import OutsideCheckoutError, escapes
from tests.conftest import ROOT


def test_it_refuses_to_open_a_file_beside_the_checkout() -> None:
    beside = ROOT.parent / "a-sibling-project" / "data.txt"
    with pytest.raises(OutsideCheckoutError, match="outside the checkout"):
        beside.read_text()


def test_it_refuses_to_list_the_folder_around_the_checkout() -> None:
    with pytest.raises(OutsideCheckoutError):
        os.listdir(ROOT.parent)


def test_files_in_the_checkout_and_the_temporary_folder_stay_readable() -> None:
    assert (ROOT / "pyproject.toml").read_text().startswith("[project]")
    with tempfile.NamedTemporaryFile("w+") as scratch:
        scratch.write("ok")
        scratch.seek(0)
        assert scratch.read() == "ok"


@pytest.mark.parametrize(
    ("path", "escaped"),
    [
        ("/home/me/code/other-project/data.txt", True),
        ("/home/me/code", True),
        ("/home/me/code/tollgate-old/x", True),  # a sibling whose name starts like the checkout's
        ("/home/me/code/tollgate/tests/x", False),
        ("/home/me/code/tollgate", False),
        ("/home/me/code/venv/lib/site.py", False),
        ("/etc/hosts", False),
    ],
)
def test_escapes_is_about_the_checkouts_own_surroundings(path: str, escaped: bool) -> None:
    allowed = ("/home/me/code/venv",)
    assert escapes(path, root="/home/me/code/tollgate", allowed=allowed) is escaped
