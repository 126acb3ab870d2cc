"""The `tollgate` command: its global options and its commands.

    export TOLLGATE_URL=https://tollgate.example.com TOLLGATE_TOKEN=...
    tollgate artifact register support-chat:v3 --uri s3://... --digest sha256:...
    tollgate rollout start --route chat --candidate 42 --wait

Exit codes (cli/errors.py): 0 done or promoted, 1 rolled back / aborted / failed, 2 usage or API
error, 3 held for a person.
"""

from __future__ import annotations

import click

from cli.accounts import tenant_group, token_group
from cli.context import Settings
from cli.deployments import deploy
from cli.http import DEFAULT_RETRIES
from cli.registry import artifact_group, eval_group
from cli.rollouts import rollout_group


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="TOLLGATE_URL",
    metavar="URL",
    help="the control plane's base URL, e.g. http://127.0.0.1:8000 [env: TOLLGATE_URL]",
)
@click.option(
    "--token",
    envvar="TOLLGATE_TOKEN",
    metavar="TOKEN",
    help="an API token; prefer the environment, which no process list shows [env: TOLLGATE_TOKEN]",
)
@click.option("--json", "json_output", is_flag=True, help="print the API's objects as JSON")
@click.option(
    "--retries",
    type=click.IntRange(min=0, max=10),
    default=DEFAULT_RETRIES,
    show_default=True,
    envvar="TOLLGATE_RETRIES",
    help="resend a request this many times after a dropped connection, a timeout or a "
    "502/503/504 (writes with the same Idempotency-Key, so nothing happens twice)",
)
@click.version_option(package_name="tollgate", prog_name="tollgate")
@click.pass_context
def cli(
    ctx: click.Context, url: str | None, token: str | None, json_output: bool, retries: int
) -> None:
    """Drive Tollgate from CI: register artifacts and evals, deploy, and run rollouts."""
    ctx.obj = Settings(url=url, token=token, json_output=json_output, retries=retries)


for command in (artifact_group, eval_group, deploy, rollout_group, tenant_group, token_group):
    cli.add_command(command)


def main() -> None:
    """The console script's entry point (pyproject.toml: [project.scripts])."""
    cli(prog_name="tollgate")


if __name__ == "__main__":
    main()
