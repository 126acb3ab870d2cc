"""The release workflow (.github/workflows/release.yml) read as GitHub Actions reads it, and its
`run:` steps run as a runner runs them: `bash --noprofile --norc -eo pipefail` on the script,
with the workflow's, the job's and the step's `env:` (their `${{ ... }}` expressions evaluated
against the inputs, variables, secrets and earlier steps' outputs given here), and
$GITHUB_OUTPUT, $GITHUB_ENV and $GITHUB_STEP_SUMMARY as files. Steps that call no `tollgate`
(checkout, setup-python, `pip install .`) are skipped: the CLI is already installed beside the
test's Python.

Also: the `tollgate ...` command lines of a shell script or of a Markdown page, for the tests
that check them against the real CLI.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
VENV_BIN = Path(sys.executable).parent
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
# The contexts this evaluator knows; anything else in an expression fails loudly.
CONTEXT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$")
SHELL_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
COMMAND_SUBSTITUTION = re.compile(r"\$\((tollgate\b[^)]*)\)")


# --- reading the workflow --------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    index: int
    name: str
    id: str | None
    run: str | None
    uses: str | None
    env: dict[str, str]

    @property
    def calls_tollgate(self) -> bool:
        return bool(self.run and tollgate_commands(self.run))


@dataclass(frozen=True)
class Workflow:
    raw: dict[Any, Any]
    job_name: str
    env: dict[str, str]  # the workflow's env, then the job's (raw, with expressions)
    shell: str
    steps: list[Step]

    @property
    def inputs(self) -> dict[str, dict[str, Any]]:
        # PyYAML reads the key `on` as YAML 1.1's boolean True.
        triggers = self.raw.get("on", self.raw.get(True)) or {}
        dispatch = triggers.get("workflow_dispatch") or {}
        return dict(dispatch.get("inputs") or {})

    def step(self, step_id: str) -> Step:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(f"no step with id {step_id!r} in {WORKFLOW.name}")

    def commands(self) -> list[str]:
        """Every `tollgate ...` command line of its run steps, in order."""
        return [command for step in self.steps for command in tollgate_commands(step.run or "")]


def load(path: Path = WORKFLOW) -> Workflow:
    raw = yaml.safe_load(path.read_text())
    jobs = raw["jobs"]
    assert len(jobs) == 1, f"{path.name}: one job expected, found {list(jobs)}"
    job_name, job = next(iter(jobs.items()))
    env = {**_strings(raw.get("env")), **_strings(job.get("env"))}
    shell = ((job.get("defaults") or {}).get("run") or {}).get("shell") or "bash"
    steps = [
        Step(
            index=index,
            name=str(step.get("name") or step.get("uses") or step.get("run", "")).strip(),
            id=step.get("id"),
            run=step.get("run"),
            uses=step.get("uses"),
            env=_strings(step.get("env")),
        )
        for index, step in enumerate(job["steps"])
    ]
    for step in steps:
        assert "if" not in job["steps"][step.index], f"step {step.name!r}: `if:` is not emulated"
        if step.run is not None:
            assert not EXPRESSION.search(step.run), (
                f"step {step.name!r} pastes an expression into its script; pass it through env:"
            )
    return Workflow(raw=raw, job_name=job_name, env=env, shell=shell, steps=steps)


def _strings(mapping: Any) -> dict[str, str]:
    return {str(key): str(value) for key, value in (mapping or {}).items()}


# --- expressions ------------------------------------------------------------------------------


def evaluate(text: str, contexts: Mapping[str, Any]) -> str:
    """`text` with each `${{ a || b || 'literal' }}` replaced by its value. A name the contexts
    lack is an error here (GitHub would give an empty string): the test forgot to give it."""

    def value_of(operand: str) -> str:
        operand = operand.strip()
        if len(operand) >= 2 and operand[0] == operand[-1] == "'":
            return operand[1:-1].replace("''", "'")
        if not CONTEXT_NAME.match(operand):
            raise ValueError(f"cannot evaluate {operand!r} (only names, || and 'literals')")
        value: Any = contexts
        for part in operand.split("."):
            if not isinstance(value, Mapping) or part not in value:
                raise KeyError(f"${{{{ {operand} }}}}: the test gives no value for it")
            value = value[part]
        return "" if value is None else str(value)

    def replace(match: re.Match[str]) -> str:
        value = ""
        for operand in match.group(1).split("||"):
            value = value_of(operand)
            if value:
                break
        return value

    return EXPRESSION.sub(replace, text)


# --- shell command lines ---------------------------------------------------------------------


def logical_lines(script: str) -> Iterator[str]:
    """A script's commands: continuation lines joined, a quote left open (a multi-line JSON
    body) carried over to the next line, blank lines and comments left out."""
    pending = ""
    for line in script.replace("\\\n", " ").splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # No closing quotation: the command goes on
            continue
        if pending.strip() and not pending.lstrip().startswith("#"):
            yield pending.strip()
        pending = ""
    if pending.strip():
        raise ValueError(f"unterminated command: {pending!r}")


def tollgate_commands(script: str) -> list[str]:
    """The `tollgate ...` commands of a script: whole lines, or inside `$(...)`."""
    found: list[str] = []
    for line in logical_lines(script):
        inner = COMMAND_SUBSTITUTION.findall(line)
        if inner:
            found.extend(command.strip() for command in inner)
        elif line.split(maxsplit=1)[0] == "tollgate":
            found.append(line)
    return found


def expand(word: str, variables: Mapping[str, str]) -> str:
    """Shell variables in one word, from `variables`; an unknown one is an error."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in variables:
            raise KeyError(f"${name}: give it a sample value")
        return variables[name]

    return SHELL_VARIABLE.sub(replace, word)


def arguments(command: str, variables: Mapping[str, str]) -> list[str]:
    """A command line as the program's argv after the shell's quoting and `variables`."""
    return [expand(word, variables) for word in shlex.split(command, comments=True)]


# --- running the job ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StepResult:
    step: Step
    returncode: int
    stdout: str
    stderr: str
    outputs: dict[str, str]
    seconds: float

    def describe(self) -> str:
        return (
            f"step {self.step.name!r} exited {self.returncode} after {self.seconds:.1f} s\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )


@dataclass
class Runner:
    """One run of the workflow's job with these inputs, variables and secrets."""

    workflow: Workflow
    inputs: dict[str, str]
    variables: dict[str, str]
    secrets: dict[str, str]
    home: Path
    log: Callable[[str], None] = lambda line: None
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    exported: dict[str, str] = field(default_factory=dict)

    def contexts(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "vars": self.variables,
            "secrets": self.secrets,
            "steps": {key: {"outputs": value} for key, value in self.outputs.items()},
            "github": {
                "workspace": str(ROOT),
                "ref_name": "main",
                "event_name": "workflow_dispatch",
            },
        }

    def environment(self, step: Step) -> dict[str, str]:
        contexts = self.contexts()
        env = {
            # The runner's own: the installed CLI first on the PATH, nothing of the test's.
            "PATH": f"{VENV_BIN}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": str(ROOT),
        }
        env.update(self.exported)
        for key, value in {**self.workflow.env, **step.env}.items():
            env[key] = evaluate(value, contexts)
        return env

    def run(self, step: Step, *, timeout: float) -> StepResult:
        """Runs one step's script; its outputs (and GITHUB_ENV exports) are kept for the next."""
        assert step.run is not None, f"step {step.name!r} has no run: script"
        assert self.workflow.shell == "bash", (
            f"only `shell: bash` is emulated, not {self.workflow.shell}"
        )
        self.home.mkdir(parents=True, exist_ok=True)
        files = {
            name: self.home / f"step-{step.index}.{name.lower()}"
            for name in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_STEP_SUMMARY")
        }
        for path in files.values():
            path.write_text("")
        script = self.home / f"step-{step.index}.sh"
        script.write_text(step.run)
        env = {**self.environment(step), **{name: str(path) for name, path in files.items()}}
        self.log(f"  step {step.name!r} ...")
        started = time.monotonic()
        # GitHub's `shell: bash`, in a session of its own so that a timeout stops the CLI too.
        process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            raise AssertionError(
                f"step {step.name!r} still running after {timeout:.0f} s\n{stderr}"
            ) from None
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        seconds = time.monotonic() - started
        outputs = _key_values(files["GITHUB_OUTPUT"].read_text())
        if step.id:
            self.outputs[step.id] = outputs
        self.exported.update(_key_values(files["GITHUB_ENV"].read_text()))
        result = StepResult(step, process.returncode, stdout, stderr, outputs, seconds)
        self.log(f"  step {step.name!r}: exit {result.returncode} after {seconds:.1f} s")
        return result

    def run_job(self, *, timeout: float) -> list[StepResult]:
        """The job's tollgate steps in order, stopping at the first that fails (as GitHub does);
        `timeout` is for each step."""
        results: list[StepResult] = []
        for step in self.workflow.steps:
            if not step.calls_tollgate:
                continue
            results.append(self.run(step, timeout=timeout))
            if results[-1].returncode != 0:
                break
        return results


def _key_values(text: str) -> dict[str, str]:
    """GITHUB_OUTPUT / GITHUB_ENV lines: `name=value` (the heredoc form is not used here)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip():
            name, equals, value = line.partition("=")
            assert equals, f"not name=value: {line!r}"
            values[name] = value
    return values
