"""The CLI keeps copies of the server's names (it imports no app): they must stay the same."""

from __future__ import annotations

from cli import accounts, deployments, registry, rollouts
from registry.choices import ArtifactFormat, Relation
from rollouts.choices import TERMINAL_STATES, DeploymentState, RolloutState
from rollouts.services.rollouts import MANUAL_ACTIONS
from tenants.choices import Scope
from tenants.services.budgets import BUDGET_FIELDS


def test_the_clis_names_are_the_servers() -> None:
    assert accounts.BUDGET_FIELDS == BUDGET_FIELDS
    assert list(Scope.values) == accounts.SCOPES
    assert list(ArtifactFormat.values) == registry.FORMATS
    assert list(Relation.values) == registry.RELATIONS
    assert set(rollouts.ACTIONS) == set(MANUAL_ACTIONS)


def test_every_settled_state_ends_a_wait() -> None:
    assert set(rollouts.OUTCOMES) == {*TERMINAL_STATES, RolloutState.PAUSED}
    assert set(rollouts.OUTCOMES) | rollouts.NOT_STEPPING | {"running"} == set(RolloutState.values)
    assert set(deployments.OUTCOMES) | {"pending"} == set(DeploymentState.values)
