"""A real Chromium (Debian's package) driven by Playwright, for end-to-end tests of the UI."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from django.db import connections
from playwright.sync_api import Page, sync_playwright

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    path = (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if path is None:
        # Not a skip: a missing browser must fail CI, which installs it (see .ci/run).
        raise RuntimeError("Chromium is not installed: apt-get install chromium")
    return path


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Page]:
    """A fresh Chromium page. Playwright's sync API runs an event loop in the test's thread, which
    makes Django refuse ORM calls there; those calls stay synchronous and safe, so allow them for
    the life of the browser (one per test, so no loop outlives its test)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield browser.new_page()
        browser.close()
        # Connections opened while the loop ran live in their own context-local slot; close
        # them here, or the test database cannot be dropped at the end of the run.
        connections.close_all()
