"""`python -m simfleet`: a bad fleet description is one line naming the field, and exit 2."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, free_port
from tests.simfleet.harness import FleetLauncher, model, stop


def run(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simfleet", "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


def fleet_yaml(*, model: dict[str, Any] | None = None, **replica: Any) -> str:
    """A one-replica fleet, valid except for the fields given."""
    spec = {"port": 19999, "models": [{"name": "tiny", **(model or {})}], **replica}
    return yaml.safe_dump({"replicas": [spec]})


def case(field: str, yaml_text: str) -> object:
    return pytest.param(yaml_text, field, id=field)


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        case("replicas.0.models.0.max_model_len", fleet_yaml(model={"max_model_len": 8})),
        case("replicas.0.models.0.colour", fleet_yaml(model={"colour": "red"})),
        case("kv_cache_tokens", fleet_yaml(model={"max_model_len": 4096, "kv_cache_tokens": 1024})),
        case("replicas.0.faults.hang_rate", fleet_yaml(faults={"hang_rate": 2})),
        case("replicas.0.port", fleet_yaml(port=70000)),
    ],
)
def test_an_invalid_config_exits_2_with_one_line_naming_the_field(
    tmp_path: Path, yaml_text: str, field: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(yaml_text)
    result = run(config)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert field in lines[0]


def test_a_missing_config_file_exits_2_with_one_line(tmp_path: Path) -> None:
    result = run(tmp_path / "absent.yaml")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "absent.yaml" in result.stderr


def test_a_config_that_is_not_yaml_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text("replicas:\n  - port: [19999\n")
    result = run(config)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "broken.yaml" in result.stderr


def test_it_exits_cleanly_on_sigterm(fleets: FleetLauncher) -> None:
    fleet = fleets.start([model("tiny")], replicas=2)
    assert stop(fleet.process) == 0


def test_the_documented_example_fleet_is_valid() -> None:
    from simfleet.profiles import load_config

    config = load_config(ROOT / "deploy" / "simfleet" / "fleet.example.yaml")
    assert [r.port for r in config.replicas] == [9101, 9102]
    assert config.replicas[0].models[0].lora_modules == {
        "support-chat-v2": "/models/support-chat/v2-lora"
    }


def test_a_port_in_use_exits_2_with_one_line_naming_it() -> None:
    with socket.create_server(("127.0.0.1", free_port())) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "simfleet", "--replicas", "1", "--base-port", str(port)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"port {port} on 127.0.0.1 is in use" in lines[0]
