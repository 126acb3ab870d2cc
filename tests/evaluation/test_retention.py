"""Old samples go, in batches; a live rollout's stay whatever their age."""

from __future__ import annotations

from pytest_django.fixtures import Settings

from core.models import AuditEvent
from evaluation.models import Feedback, RequestSample
from evaluation.services import samples_prune
from rollouts.choices import RolloutState
from rollouts.models import Rollout
from rollouts.services.rollouts import rollout_transition
from tests.conftest import stored
from tests.evaluation.conftest import days_ago


def test_samples_past_retention_are_deleted_in_batches(settings: Settings, db: None) -> None:
    settings.SAMPLE_RETENTION_DAYS = 30
    old = stored(None, "baseline", 25, ts=days_ago(31))
    Feedback.objects.create(sample=old[0], value="up")
    recent = stored(None, "baseline", 5, ts=days_ago(29))
    assert samples_prune(batch=10) == 25
    assert set(RequestSample.objects.values_list("pk", flat=True)) == {s.pk for s in recent}
    assert not Feedback.objects.exists()
    pruned = AuditEvent.objects.filter(action="evaluation.samples_pruned")
    assert [e.data["deleted"] for e in pruned.order_by("id")] == [10, 10, 5]


def test_a_live_rollouts_samples_are_kept_until_it_ends(
    settings: Settings, running: Rollout
) -> None:
    settings.SAMPLE_RETENTION_DAYS = 1
    stored(running, "canary", 3, ts=days_ago(2))
    assert samples_prune() == 0
    rollout_transition(
        rollout_id=running.pk, to=RolloutState.ROLLED_BACK, actor=None, reason="done"
    )
    assert samples_prune() == 3


def test_a_run_stops_after_its_batches_and_leaves_the_rest_for_the_next(
    settings: Settings, db: None
) -> None:
    settings.SAMPLE_RETENTION_DAYS = 1
    stored(None, "baseline", 30, ts=days_ago(3))
    assert samples_prune(batch=10, batches=2) == 20
    assert RequestSample.objects.count() == 10
