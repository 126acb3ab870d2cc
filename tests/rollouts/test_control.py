"""Manual control of a rollout (the webhooks that announce it: tests/workers/test_rollouts.py)."""

from __future__ import annotations

import pytest

from core.errors import Conflict, DomainError, PermissionDenied
from rollouts.choices import RolloutState
from rollouts.models import Rollout, RolloutEvent
from rollouts.plans import Plan, Step
from rollouts.services.rollouts import rollout_control
from tenants.models import User

S = RolloutState
PLAN = Plan(steps=(Step(weight=5), Step(weight=50), Step(weight=100)))


@pytest.fixture
def plan() -> Plan:
    return PLAN


@pytest.fixture
def gates() -> None:
    return None


def test_pause_resume_skip_and_promote_by_hand(running: Rollout, release_manager: User) -> None:
    def act(action: str) -> Rollout:
        return rollout_control(
            actor=release_manager, rollout_id=running.pk, action=action, reason="by hand"
        )

    assert act("pause").state == S.PAUSED
    assert act("resume").state == S.RUNNING
    skipped = act("skip")
    assert (skipped.state, skipped.step_index) == (S.RUNNING, 1)
    assert act("promote").state == S.PROMOTED
    reasons = list(RolloutEvent.objects.values_list("reason", flat=True))
    assert reasons[-4:] == [
        "pause: by hand",
        "resume: by hand",
        "skip: by hand",
        "promote: by hand",
    ]


def test_manual_control_needs_a_release_manager_and_a_reason(
    running: Rollout, viewer: User, release_manager: User
) -> None:
    with pytest.raises(PermissionDenied):
        rollout_control(actor=viewer, rollout_id=running.pk, action="rollback", reason="no")
    with pytest.raises(DomainError, match="reason"):
        rollout_control(actor=release_manager, rollout_id=running.pk, action="rollback", reason="")
    with pytest.raises(Conflict, match="not paused"):
        rollout_control(actor=release_manager, rollout_id=running.pk, action="resume", reason="x")
    with pytest.raises(DomainError, match="unknown action"):
        rollout_control(actor=release_manager, rollout_id=running.pk, action="yolo", reason="x")
