"""docs/ci.md and .github/workflows/release.yml cannot drift from what they describe: every
`tollgate ...` line they show runs through the real CLI up to its first request (options,
arguments and the CLI's own checks), the `manage.py` line parses with the command's parser, every
`curl` names an API endpoint with a body its serializer takes, and `gh workflow run` gives the
workflow's inputs. No server, no database."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from django.core.management import load_command_class
from django.urls import resolve
from rest_framework import serializers

from cli.main import cli
from registry.services import normalize_digest
from rollouts.api import infrastructure
from rollouts.api import serializers as rollout_serializers
from rollouts.api.plan_templates import parsed as parsed_template
from tenants.api import serializers as tenant_serializers
from tenants.management.commands import create_api_token
from tests.docs import workflow
from tests.docs.workflow import ROOT, arguments, evaluate, logical_lines, tollgate_commands

DOC = ROOT / "docs" / "ci.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`(tollgate [^`]+)`")
NOT_A_COMMAND = ("<", "...", "|", "…")  # placeholders: `tollgate <command> --help`
NOT_REACHED = "TOLLGATE_URL is not set"  # what a command says at its first request, unset

# Sample values for the shell variables the doc's examples use.
DOC_VARIABLES = {
    "TOLLGATE_URL": "https://tollgate.example.com",
    "TOLLGATE_TOKEN": "tg_example",
    "DEPLOYMENT_ID": "42",
}
# What a person gives the workflow when they run it.
WORKFLOW_INPUTS = {
    "version": "v2",
    "parent": "v1",
    "uri": "s3://models/support-chat/v2",
    "digest": "sha256:" + "ab" * 32,
    "eval_results": "tests/registry/data/results_2026-11-30T12-00-00.json",
    "fleet": "green",
    "plan_template": "standard",
}
# The API's input serializer for each endpoint the doc POSTs to (by URL name).
BODIES: dict[str, type[serializers.Serializer[dict[str, Any]]]] = {
    "api-fleets": infrastructure.FleetInput,
    "api-replicas": infrastructure.ReplicaInput,
    "api-routes": infrastructure.RouteInput,
    "api-plan-templates": rollout_serializers.PlanTemplateCreateInput,
    "api-tenant-keys": tenant_serializers.ApiKeyCreateInput,
}


def shell_blocks(markdown: str) -> Iterator[str]:
    for language, body in FENCE.findall(markdown):
        if language in ("sh", "bash", "shell", "console"):
            yield body


def doc_lines() -> list[str]:
    return [line for block in shell_blocks(DOC.read_text()) for line in logical_lines(block)]


def workflow_variables(flow: workflow.Workflow) -> dict[str, str]:
    """The environment the workflow's scripts see, for the sample inputs."""
    contexts = {
        "inputs": WORKFLOW_INPUTS,
        "vars": {"TOLLGATE_URL": "https://tollgate.example.com"},
        "secrets": {"TOLLGATE_TOKEN": "tg_example"},
        "steps": {"deploy": {"outputs": {"id": "42"}}},
    }
    variables = {key: evaluate(value, contexts) for key, value in flow.env.items()}
    for step in flow.steps:
        variables.update({key: evaluate(value, contexts) for key, value in step.env.items()})
    return variables


def assert_runs_until_its_first_request(argv: list[str], where: Path) -> None:
    """`tollgate ARGV` parses and passes the CLI's own checks: with no TOLLGATE_URL it stops
    exactly where it would send its first request (or prints its help)."""
    env: Mapping[str, str | None] = {
        "TOLLGATE_URL": None,
        "TOLLGATE_TOKEN": None,
        "TOLLGATE_RETRIES": None,
    }
    argv = list(argv)
    for index, arg in enumerate(argv):  # files the command reads (eval results) exist for it
        if arg.endswith(".json") and not arg.startswith("-"):
            path = where / arg
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}")
            argv[index] = str(path)
    result = CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)
    shown = f"tollgate {' '.join(argv)}\nexit {result.exit_code}\n{result.output}"
    if "--help" in argv or "-h" in argv:
        assert result.exit_code == 0, shown
        return
    assert result.exit_code == 2, shown
    assert NOT_REACHED in result.stderr, shown


def test_the_doc_shows_the_pipeline_commands() -> None:
    commands = [
        arguments(c, DOC_VARIABLES)[1:3] for line in doc_lines() for c in tollgate_commands(line)
    ]
    for expected in (
        ["artifact", "register"],
        ["eval", "upload"],
        ["deploy", "--artifact"],
        ["rollout", "start"],
        ["rollout", "status"],
        ["rollout", "promote"],
        ["rollout", "rollback"],
    ):
        assert expected in commands, f"docs/ci.md shows no `tollgate {' '.join(expected)}`"


def test_every_tollgate_line_in_the_doc_runs_with_the_real_cli(tmp_path: Path) -> None:
    lines = [c for line in doc_lines() for c in tollgate_commands(line)]
    lines += [
        span
        for span in INLINE.findall(DOC.read_text())
        if not any(mark in span for mark in NOT_A_COMMAND)
    ]
    assert len(lines) >= 8, lines
    for line in lines:
        argv = arguments(line, DOC_VARIABLES)
        assert argv[0] == "tollgate", line
        assert_runs_until_its_first_request(argv[1:], tmp_path)


def test_every_tollgate_line_in_the_workflow_runs_with_the_real_cli(tmp_path: Path) -> None:
    flow = workflow.load()
    variables = workflow_variables(flow)
    commands = flow.commands()
    assert [arguments(c, variables)[1:3] for c in commands] == [
        ["artifact", "register"],
        ["eval", "upload"],
        ["deploy", "--artifact"],
        ["rollout", "start"],
    ]
    for command in commands:
        assert_runs_until_its_first_request(arguments(command, variables)[1:], tmp_path)


def test_the_workflow_installs_the_cli_and_takes_its_values_from_inputs_vars_and_secrets() -> None:
    flow = workflow.load()
    assert set(flow.inputs) == set(WORKFLOW_INPUTS), "the doc test's sample inputs are stale"
    others = [step.run.strip() for step in flow.steps if step.run and not step.calls_tollgate]
    assert others == ["pip install ."]
    assert flow.env["TOLLGATE_URL"] == "${{ vars.TOLLGATE_URL }}"
    assert flow.env["TOLLGATE_TOKEN"] == "${{ secrets.TOLLGATE_TOKEN }}"
    rollout = flow.step("rollout")
    assert rollout.env["CANDIDATE"] == "${{ steps.deploy.outputs.id }}"
    assert flow.shell == "bash"


def test_the_digests_shown_are_well_formed() -> None:
    digests = re.findall(r"(?:--digest |digest=)(\S+)", DOC.read_text())
    assert digests
    for digest in digests:
        normalize_digest(digest)  # the server's check: sha256 and 64 hex characters


def test_the_manage_py_line_parses_with_the_commands_parser() -> None:
    found = [arguments(line, DOC_VARIABLES) for line in doc_lines() if "manage.py" in line]
    assert found, "docs/ci.md shows no manage.py create_api_token line"
    for argv in found:
        assert argv[:3] == ["python", "manage.py", "create_api_token"], argv
        command = load_command_class("tenants", "create_api_token")
        options = command.create_parser("manage.py", "create_api_token").parse_args(argv[3:])
        assert options.username
        assert options.scope
        assert create_api_token._expiry(options.expires) is not None


def test_every_curl_posts_a_body_the_api_takes() -> None:
    curls = [arguments(line, DOC_VARIABLES) for line in doc_lines() if line.startswith("curl ")]
    assert len(curls) >= 4
    for argv in curls:
        url = next(arg for arg in argv if "/api/v1/" in arg)
        path = "/api/v1/" + url.split("/api/v1/", 1)[1]
        match = resolve(path)
        assert argv[argv.index("-X") + 1] == "POST", argv
        body = json.loads(argv[argv.index("-d") + 1])
        serializer_class = BODIES.get(match.url_name or "")
        assert serializer_class is not None, f"{path} ({match.url_name}): add its serializer"
        serializer = serializer_class(data=body)
        assert serializer.is_valid(), (path, serializer.errors)
        unknown = set(body) - set(serializer.fields)
        assert not unknown, f"{path}: the API ignores {sorted(unknown)}"
        if serializer_class is rollout_serializers.PlanTemplateCreateInput:
            parsed_template(serializer.validated_data)  # the plan's own rules (weights to 100)
            step_fields = set(rollout_serializers.StepInput().fields)
            for step in body["steps"]:
                assert not set(step) - step_fields, f"{path}: the API ignores {step}"
            gate_fields = set(rollout_serializers.SloGatesInput().fields)
            assert not set(body.get("gates", {})) - gate_fields, f"{path}: unknown gates"


def test_the_gh_line_gives_the_workflow_its_inputs() -> None:
    flow = workflow.load()
    lines = [arguments(line, DOC_VARIABLES) for line in doc_lines() if line.startswith("gh ")]
    assert lines, "docs/ci.md shows no `gh workflow run` line"
    for argv in lines:
        assert argv[:4] == ["gh", "workflow", "run", "release.yml"], argv
        given = dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "-f")
        assert set(given) <= set(flow.inputs), set(given) - set(flow.inputs)
        required = {name for name, spec in flow.inputs.items() if spec.get("required")}
        assert required <= set(given), required - set(given)


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (
            'x=$(tollgate deploy --fleet "$F" \\\n  --wait)\necho "id=$x"',
            [["deploy", "--fleet", "$F", "--wait"]],
        ),
        (
            "tollgate rollout status 3  # a comment\n# tollgate rollout skip 3\n",
            [["rollout", "status", "3"]],
        ),
        ("curl -d '{\"a\":\n  1}' x\ntollgate eval upload r.json", [["eval", "upload", "r.json"]]),
        ('echo "tollgate rollout status $id"\n', []),
    ],
)
def test_command_lines_are_found_as_the_shell_reads_them(
    script: str, expected: list[list[str]]
) -> None:
    found = [shlex.split(command, comments=True) for command in tollgate_commands(script)]
    assert found == [["tollgate", *words] for words in expected]
