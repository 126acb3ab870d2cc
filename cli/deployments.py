"""`tollgate deploy`: put an artifact on a fleet under a served-model name.

POST /api/v1/deployments answers {"id", "artifact", "fleet", "served_model_name", "kind",
"max_model_len", "state", "problems"}; a deployment is pending until every replica serves it
(ready), or failed with its problems named.
"""

from __future__ import annotations

from typing import Any

import click

from cli.context import Settings, note, pass_settings
from cli.errors import EXIT_FAILED, EXIT_OK
from cli.params import ARTIFACT, artifact_name
from cli.wait import Reading, wait_options, wait_until_settled

# The API's DeploymentState values that end a wait. Draining and retired ones will never be
# ready either: waiting on them is a failure, not something to sit out.
OUTCOMES = {
    "ready": EXIT_OK,
    "failed": EXIT_FAILED,
    "draining": EXIT_FAILED,
    "retired": EXIT_FAILED,
}


def deployment_path(deployment_id: int) -> str:
    return f"/api/v1/deployments/{deployment_id}"


def deployment_reading(deployment: dict[str, Any]) -> Reading:
    state = str(deployment.get("state", "?"))
    line = (
        f"deployment {deployment.get('id')} of {deployment.get('artifact')} on "
        f"{deployment.get('fleet')} as {deployment.get('served_model_name')}: {state}"
    )
    problems = [str(p) for p in deployment.get("problems") or []]
    if problems:
        line += " - " + "; ".join(problems)
    done = 1 if state == "ready" else 0
    return Reading(line=line, done=done, total=1, exit_code=OUTCOMES.get(state))


@click.command("deploy")
@click.option("--artifact", type=ARTIFACT, required=True, help="the registered artifact")
@click.option("--fleet", required=True, help="the fleet's name")
@click.option("--served-model-name", required=True, help="the model name clients ask for")
@click.option(
    "--kind",
    type=click.Choice(["full", "lora"]),
    default="full",
    show_default=True,
    help="a full model, or a LoRA adapter loaded onto the fleet's base model",
)
@click.option(
    "--max-model-len", type=click.IntRange(min=1), help="the context length it is served with"
)
@wait_options("the deployment")
@pass_settings
def deploy(
    settings: Settings,
    artifact: tuple[str, str],
    fleet: str,
    served_model_name: str,
    kind: str,
    max_model_len: int | None,
    wait: bool,
    interval: float,
    timeout: float,
) -> None:
    """Deploy an artifact to a fleet; prints the deployment's id.

    With --wait: exits 0 once it is ready, 1 if it failed, 2 on an error or past --timeout.
    """
    body: dict[str, Any] = {
        "artifact": artifact_name(artifact),
        "fleet": fleet,
        "served_model_name": served_model_name,
        "kind": kind,
    }
    if max_model_len is not None:
        body["max_model_len"] = max_model_len
    deployment = settings.api().post("/api/v1/deployments", body)
    code = EXIT_OK
    if not wait:
        note(deployment_reading(deployment).line)
    else:
        deployment_id = int(deployment["id"])
        deployment, code = wait_until_settled(
            lambda: dict(settings.api().get(deployment_path(deployment_id))),
            deployment_reading,
            what=f"deployment {deployment_id}",
            interval=interval,
            timeout=timeout,
        )
    if settings.json_output:
        settings.print_json(deployment)
    else:
        click.echo(deployment["id"])
    click.get_current_context().exit(code)
