"""Fleets for the simfleet tests (see tests/simfleet/harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simfleet.harness import FleetLauncher


@pytest.fixture
def fleets(tmp_path: Path) -> Iterator[FleetLauncher]:
    """Fleets of this test alone, stopped when it ends."""
    launcher = FleetLauncher(tmp_path)
    yield launcher
    launcher.stop_all()


@pytest.fixture(scope="module")
def module_fleets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetLauncher]:
    """Fleets shared by the tests of one module, stopped after its last test."""
    launcher = FleetLauncher(tmp_path_factory.mktemp("simfleet"))
    yield launcher
    launcher.stop_all()
