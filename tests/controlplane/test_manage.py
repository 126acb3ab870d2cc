"""The operator's view: what `manage.py` prints when the environment is wrong."""

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, free_port


def run_manage(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    """manage.py in a child process; a variable given as None is removed from its environment."""
    merged = {**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings", **env}
    environ = {name: value for name, value in merged.items() if value is not None}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_it_reports_a_malformed_database_url_in_one_line() -> None:
    result = run_manage("check", DATABASE_URL="mysql://app:hunter2@db/tollgate")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "DATABASE_URL" in lines[0]
    assert "postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME" in lines[0]
    assert "hunter2" not in result.stderr


def test_it_reports_an_unreachable_database_in_one_line() -> None:
    url = f"postgres://app:hunter2@127.0.0.1:{free_port()}/tollgate"
    result = run_manage("migrate", DATABASE_URL=url)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "DATABASE_URL" in lines[0]
    assert "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr


def test_it_names_a_missing_secret_key(tmp_path: Path) -> None:
    result = run_manage("check", SECRET_KEY="", TOLLGATE_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "SECRET_KEY: expected a string of at least 32 characters" in result.stderr
    assert "Traceback" not in result.stderr


def test_it_uses_the_development_key_in_var_when_secret_key_is_unset(tmp_path: Path) -> None:
    (tmp_path / "secret-key").write_text("d" * 50 + "\n")
    script = "from django.conf import settings; print(settings.SECRET_KEY)"
    result = run_manage(
        "shell", "--no-imports", "-c", script, SECRET_KEY=None, TOLLGATE_VAR_DIR=str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "d" * 50


def test_a_site_serving_a_public_host_never_uses_the_development_key(tmp_path: Path) -> None:
    (tmp_path / "secret-key").write_text("d" * 50 + "\n")
    result = run_manage(
        "check",
        SECRET_KEY=None,
        TOLLGATE_VAR_DIR=str(tmp_path),
        ALLOWED_HOSTS="tollgate.example.com",
    )
    assert result.returncode != 0
    assert "SECRET_KEY: expected a string of at least 32 characters; not set" in result.stderr
