"""The installed `tollgate` console script (pyproject.toml [project.scripts], installed by
`make`), run as a CI job runs it: a separate process with only the environment to go on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rollouts.models import Rollout

SCRIPT = Path(sys.executable).parent / "tollgate"


def test_the_console_script_is_installed_and_talks_to_the_api(
    server: str, ci_token: str, running: Rollout, tmp_path: Path
) -> None:
    assert SCRIPT.exists(), f"{SCRIPT} is missing: run `make venv` (it installs the project)"
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "TOLLGATE_URL": server,
        "TOLLGATE_TOKEN": ci_token,
    }
    # From another directory, so that it runs from the installed package, not the checkout.
    result = subprocess.run(
        [str(SCRIPT), "--json", "rollout", "status", str(running.pk)],
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["state"] == "running"

    paused = subprocess.run(
        [str(SCRIPT), "rollout", "pause", str(running.pk), "--reason", "smoke test"],
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert paused.returncode == 0, paused.stderr
    waited = subprocess.run(
        [str(SCRIPT), "rollout", "status", str(running.pk), "--wait", "--interval", "0.1"],
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert waited.returncode == 3, waited.stderr
    assert "held for a person: pause: smoke test" in waited.stderr
