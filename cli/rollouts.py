"""`tollgate rollout ...`: start a rollout, watch it, and steer it by hand.

A rollout moves a route's traffic to a candidate deployment step by step (rollouts/choices.py:
RolloutState). For a pipeline the outcome is the exit code: promoted 0; rolled back, aborted or
failed 1; paused 3, because a paused rollout waits for a person and no pipeline should sit on it.
"""

from __future__ import annotations

from typing import Any

import click

from cli.context import Settings, note, pass_settings
from cli.errors import EXIT_FAILED, EXIT_HELD, EXIT_OK
from cli.params import STEP
from cli.wait import Reading, wait_options, wait_until_settled

# The API's RolloutState values. Settled ones end a wait, with the exit code a pipeline acts on.
OUTCOMES = {
    "promoted": EXIT_OK,
    "rolled_back": EXIT_FAILED,
    "aborted": EXIT_FAILED,
    "failed": EXIT_FAILED,
    "paused": EXIT_HELD,  # held for a person: stop waiting, but it is not over
}
NOT_STEPPING = frozenset({"pending", "preflight"})  # no step is live yet
# rollouts/services/rollouts.py MANUAL_ACTIONS, with what each asks for.
ACTIONS = {
    "promote": "Promote the candidate now: it takes all of the route's traffic.",
    "pause": "Hold the rollout at its step (a person decides what comes next).",
    "resume": "Resume a paused rollout at its step.",
    "skip": "Move a running rollout to its next step now.",
    "rollback": "Roll back: all traffic goes back to the baseline.",
    "abort": "Abort the rollout: traffic goes back to the baseline.",
}


def rollout_path(rollout_id: int) -> str:
    return f"/api/v1/rollouts/{rollout_id}"


def latest_reason(rollout: dict[str, Any]) -> str:
    """Why the rollout is where it is: its last event's reason (the judge's verdict, a person's
    words, a guardrail)."""
    events = rollout.get("events") or []
    return str(events[-1].get("reason") or "") if events else ""


def _step(rollout: dict[str, Any]) -> tuple[int, int]:
    """(steps reached, steps in the plan)."""
    total = len((rollout.get("plan") or {}).get("steps") or [])
    state = rollout.get("state", "")
    if state == "promoted":
        return total, total
    if state in NOT_STEPPING:
        return 0, total
    return min(int(rollout.get("step_index") or 0) + 1, total), total


def _weight(rollout: dict[str, Any]) -> str:
    return f"{float(rollout.get('canary_weight') or 0):g}%"


def rollout_reading(rollout: dict[str, Any]) -> Reading:
    state = str(rollout.get("state", "?"))
    done, total = _step(rollout)
    where = "" if state in NOT_STEPPING else f"step {done}/{total}, "
    line = f"rollout {rollout.get('id')} {state}: {where}canary {_weight(rollout)}"
    reason = latest_reason(rollout)
    if reason:
        line += f" - {reason}"
    return Reading(line=line, done=done, total=total, exit_code=OUTCOMES.get(state))


def summary(rollout: dict[str, Any]) -> str:
    """The rollout for a person, a few lines."""
    done, total = _step(rollout)
    state = rollout.get("state", "?")
    lines = [
        f"rollout {rollout.get('id')} on route {rollout.get('route')}: {state}",
        f"  candidate {rollout.get('candidate')}, baseline {rollout.get('baseline')}"
        + (f", control {rollout['control']}" if rollout.get("control") else ""),
        f"  step {done} of {total}, canary {_weight(rollout)}",
    ]
    reason = latest_reason(rollout)
    if reason:
        lines.append(f"  latest: {reason}")
    return "\n".join(lines)


def outcome_note(rollout: dict[str, Any], code: int) -> str:
    """What a settled wait means, and for a held rollout what a person can do."""
    rollout_id, state = rollout.get("id"), rollout.get("state")
    reason = latest_reason(rollout)
    because = f": {reason}" if reason else ""
    if code == EXIT_HELD:
        return (
            f"rollout {rollout_id} is paused, held for a person{because}\n"
            f"  decide: tollgate rollout resume|promote|rollback {rollout_id} --reason '...'"
        )
    return f"rollout {rollout_id} {state}{because}"


def _watch(
    settings: Settings, rollout_id: int, interval: float, timeout: float
) -> tuple[dict[str, Any], int]:
    """Waits until the rollout settles; its last state and the exit code that says how."""
    final, code = wait_until_settled(
        lambda: dict(settings.api().get(rollout_path(rollout_id))),
        rollout_reading,
        what=f"rollout {rollout_id}",
        interval=interval,
        timeout=timeout,
    )
    note(outcome_note(final, code))
    return final, code


@click.group("rollout")
def rollout_group() -> None:
    """Start, watch and steer rollouts."""


@rollout_group.command("start")
@click.option("--route", required=True, help="the route's name")
@click.option("--candidate", type=click.IntRange(min=1), required=True, help="deployment id")
@click.option(
    "--control",
    type=click.IntRange(min=1),
    help="id of a second deployment of the baseline's artifact, compared under the same load",
)
@click.option("--template", help="a saved plan template's name (its steps and gates)")
@click.option(
    "--step",
    "steps",
    type=STEP,
    multiple=True,
    help="a plan step, repeated in order (the last at 100); replaces the template's steps",
)
@click.option(
    "--override-reason",
    default="",
    help="why the rollout may start although the candidate fails its promotion gates",
)
@click.option("--no-start", is_flag=True, help="create the rollout but leave it pending")
@wait_options("the rollout")
@pass_settings
def rollout_start(
    settings: Settings,
    route: str,
    candidate: int,
    control: int | None,
    template: str | None,
    steps: tuple[dict[str, float | int], ...],
    override_reason: str,
    no_start: bool,
    wait: bool,
    interval: float,
    timeout: float,
) -> None:
    """Create a rollout of the CANDIDATE deployment on ROUTE and start it.

    Prints the rollout's id. With --wait: exits 0 promoted, 1 rolled back/aborted/failed,
    3 paused (held for a person), 2 on an error or past --timeout.
    """
    body: dict[str, Any] = {"route": route, "candidate_deployment": candidate}
    if control is not None:
        body["control_deployment"] = control
    if template:
        body["plan_template"] = template
    if steps:
        body["steps"] = list(steps)
    if override_reason:
        body["override_reason"] = override_reason
    body["start"] = not no_start
    rollout = settings.api().post("/api/v1/rollouts", body)
    code = EXIT_OK
    if no_start or not wait:
        note(summary(rollout))
    else:
        # The wait's first line shows where it started.
        rollout, code = _watch(settings, int(rollout["id"]), interval, timeout)
    if settings.json_output:
        settings.print_json(rollout)
    else:
        click.echo(rollout["id"])
    click.get_current_context().exit(code)


@rollout_group.command("status")
@click.argument("rollout_id", metavar="ID", type=click.IntRange(min=1))
@wait_options("the rollout")
@pass_settings
def rollout_status(
    settings: Settings, rollout_id: int, wait: bool, interval: float, timeout: float
) -> None:
    """Show rollout ID: state, step, canary weight and the latest reason.

    With --wait: exits 0 promoted, 1 rolled back/aborted/failed, 3 paused (held for a person),
    2 on an error or past --timeout.
    """
    code = EXIT_OK
    if wait:
        rollout, code = _watch(settings, rollout_id, interval, timeout)
    else:
        rollout = settings.api().get(rollout_path(rollout_id))
    if settings.json_output:
        settings.print_json(rollout)
    else:
        click.echo(summary(rollout))
    click.get_current_context().exit(code)


def _action_command(action: str, help_text: str) -> click.Command:
    @click.command(action, help=f"{help_text}\n\nPrints the rollout afterwards.")
    @click.argument("rollout_id", metavar="ID", type=click.IntRange(min=1))
    @click.option("--reason", required=True, help="why: kept in the rollout's history")
    @pass_settings
    def command(settings: Settings, rollout_id: int, reason: str) -> None:
        rollout = settings.api().post(
            f"{rollout_path(rollout_id)}/actions", {"action": action, "reason": reason}
        )
        if settings.json_output:
            settings.print_json(rollout)
        else:
            click.echo(summary(rollout))

    return command


for _action, _help in ACTIONS.items():
    rollout_group.add_command(_action_command(_action, _help))
