"""The judge wired into the rollout loop: looks on real stored samples, verdicts kept sparingly
and reproducible, decisions acted on through the transition function."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import replace

from django.utils import timezone

from core.models import AuditEvent
from evaluation import selectors
from evaluation.judging import recompute, step_look
from evaluation.models import DeploymentCost, Feedback, RequestSample, Verdict
from orchestration.engine import advance, decide
from rollouts.choices import RolloutState
from rollouts.models import Rollout, RolloutEvent
from rollouts.plans import Plan, Step
from rollouts.services.rollouts import rollout_control
from tenants.models import User
from tests.conftest import stored
from tests.factories import RequestSampleFactory

S = RolloutState


def traffic(
    rollout: Rollout,
    arm: str,
    count: int,
    *,
    seed: int,
    ttft_scale: float = 1.0,
    step: int = 0,
    cost_scale: float = 1.0,
    per_s: float = 30.0,
) -> None:
    """Requests with the spread real ones have: lognormal latencies and varied lengths, arriving
    `per_s` a second up to now on one of three replicas."""
    rng = random.Random(seed)  # noqa: S311 -- test data, not secrets
    now = timezone.now()
    RequestSample.objects.bulk_create(
        RequestSampleFactory.build(
            rid=f"{arm}-{seed}-{i}",
            ts=now - dt.timedelta(seconds=(count - i) / per_s),
            replica=f"{arm}-{rng.randrange(3)}",
            rollout_id=rollout.pk,
            step=step,
            route="chat",
            arm=arm,
            deployment="x",
            tenant="tenant-a",
            status=200,
            finish="stop",
            prompt_tokens=rng.randint(20, 400),
            output_tokens=(out := rng.randint(20, 300)),
            ttft_ms=rng.lognormvariate(4, 0.3) * ttft_scale,
            tpot_ms=rng.lognormvariate(1.6, 0.2),
            e2e_ms=rng.lognormvariate(6, 0.3),
            cost=out * 2e-6 * cost_scale,
        )
        for i in range(count)
    )


def baked(rollout: Rollout) -> None:
    Rollout.objects.filter(pk=rollout.pk).update(
        step_started_at=timezone.now() - dt.timedelta(seconds=120)
    )
    rollout.refresh_from_db()


def test_an_interim_look_rolls_back_a_clearly_worse_candidate_before_the_step_ends(
    running: Rollout,
) -> None:
    traffic(running, "baseline", 1500, seed=1)
    traffic(running, "canary", 1500, seed=2, ttft_scale=2.0)
    decision = advance(running.pk)  # not baked: the step started a moment ago
    assert decision is not None
    assert decision.action == "rollback", decision.reason
    assert decision.reason.startswith("the A/B judge: worse beyond doubt")
    running.refresh_from_db()
    assert running.state == S.ROLLED_BACK
    event = RolloutEvent.objects.get(rollout=running, to_state=S.ROLLED_BACK)
    verdict = Verdict.objects.get(pk=event.evidence["judge"]["verdict"])
    assert (verdict.decision, verdict.final, verdict.step) == ("rollback", False, 0)


def test_costs_are_judged_only_when_both_throughputs_were_entered(running: Rollout) -> None:
    # The canary's records cost three times as much per token: what an observed throughput
    # gives a canary idling at 5% beside a busy baseline, with nothing wrong with the model.
    traffic(running, "baseline", 1500, seed=11)
    traffic(running, "canary", 1500, seed=12, cost_scale=3.0)
    look = step_look(running, now=timezone.now(), final=False)
    assert look is not None
    costs = {v.metric: v for v in look.report.verdicts if v.metric.startswith("cost")}
    assert costs
    assert {v.outcome for v in costs.values()} == {"inconclusive"}, costs
    assert advance(running.pk).action == "hold"  # type: ignore[union-attr]

    # Entered throughputs (from benchmarks) make the same gap a real one.
    DeploymentCost.objects.create(deployment=running.baseline, throughput_tokens_per_s=900)
    DeploymentCost.objects.create(deployment=running.candidate, throughput_tokens_per_s=300)
    decision = advance(running.pk)
    assert decision is not None
    assert decision.action == "rollback", decision.reason
    assert "cost_per_mtok" in decision.reason


def test_a_control_arm_compares_the_candidate_with_the_baseline_under_the_same_load(
    running: Rollout,
) -> None:
    # The busy baseline is twice as slow as the lightly loaded arms; the candidate matches the
    # baseline only because it is slow itself: next to the control, at its own load, it is 2x.
    traffic(running, "baseline", 1500, seed=13, ttft_scale=2.0)
    traffic(running, "canary", 1500, seed=14, ttft_scale=2.0)
    look = step_look(running, now=timezone.now(), final=False)
    assert look is not None
    assert look.decision != "rollback"  # against the busy baseline it looks equal

    traffic(running, "control", 1500, seed=15)
    decision = advance(running.pk)
    assert decision is not None
    assert decision.action == "rollback", decision.reason
    assert "ttft" in decision.reason


def test_an_equal_candidate_passes_the_step_on_the_final_look(running: Rollout) -> None:
    traffic(running, "baseline", 3000, seed=3)
    traffic(running, "canary", 3000, seed=4)
    baked(running)
    decision = advance(running.pk)
    assert decision is not None
    assert decision.action == "advance", decision.reason
    running.refresh_from_db()
    assert (running.state, running.step_index) == (S.RUNNING, 1)
    verdict = Verdict.objects.get(rollout=running, final=True)
    assert verdict.decision == "promote"
    assert AuditEvent.objects.filter(action="evaluation.verdict.promote").count() == 1


def test_a_stored_verdict_is_reproduced_from_the_stored_samples(running: Rollout) -> None:
    traffic(running, "baseline", 1200, seed=5)
    traffic(running, "canary", 1200, seed=6)
    baked(running)
    advance(running.pk)
    verdict = Verdict.objects.get(rollout=running, final=True)
    # Samples that arrive after the look are outside its window.
    traffic(running, "canary", 300, seed=7, ttft_scale=3.0)
    assert recompute(verdict).to_dict() == verdict.report


def test_unresolved_evidence_at_the_last_judged_step_pauses_for_a_person(
    running: Rollout, release_manager: User
) -> None:
    # Too few to settle either way: TTFT 5% slower against a 10% margin, on 250 requests.
    traffic(running, "baseline", 250, seed=8)
    traffic(running, "canary", 250, seed=9, ttft_scale=1.05)
    Rollout.objects.filter(pk=running.pk).update(
        step_started_at=timezone.now() - dt.timedelta(seconds=30 + 301)
    )
    running.refresh_from_db()
    decision = advance(running.pk)
    assert decision is not None
    assert decision.action == "pause", decision.reason
    assert decision.reason.startswith("the A/B judge asks a person: unresolved")
    running.refresh_from_db()
    assert running.state == S.PAUSED
    # A person resumes to gather more evidence: the next tick waits instead of pausing again.
    rollout_control(
        actor=release_manager, rollout_id=running.pk, action="resume", reason="more traffic"
    )
    running.refresh_from_db()
    again = advance(running.pk)
    assert again is not None
    assert again.action == "hold"
    running.refresh_from_db()
    assert running.state == S.RUNNING


def test_a_step_short_of_the_judges_samples_waits_rather_than_asking_a_person(
    running: Rollout,
) -> None:
    stored(running, "baseline", 60)
    stored(running, "canary", 60)
    baked(running)
    decision = advance(running.pk)
    assert decision is not None
    assert decision.action == "hold"
    assert decision.reason.startswith("the A/B judge waits for samples for")
    running.refresh_from_db()
    assert running.state == S.RUNNING


def test_interim_looks_are_kept_sparingly(running: Rollout) -> None:
    traffic(running, "baseline", 300, seed=10)
    traffic(running, "canary", 300, seed=11)
    for _ in range(5):
        assert decide(running, record=True).action == "hold"
    assert Verdict.objects.filter(rollout=running).count() == 1
    later = timezone.now() + dt.timedelta(seconds=61)
    decide(running, now=later, record=True)
    assert Verdict.objects.filter(rollout=running).count() == 2


def test_the_100_percent_step_runs_on_the_guardrails_alone(running: Rollout) -> None:
    Rollout.objects.filter(pk=running.pk).update(
        step_index=1, step_started_at=timezone.now() - dt.timedelta(seconds=60)
    )
    running.refresh_from_db()
    stored(running, "canary", 60)
    decision = decide(running, record=True)
    assert decision.action == "promote"
    assert "judge" not in decision.evidence
    assert not Verdict.objects.exists()


def two_judged_steps(rollout: Rollout) -> None:
    """Gives the rollout a 5%, 50% and 100% plan and moves it to the 50% step."""
    plan = Plan(steps=(Step(weight=5), Step(weight=50), Step(weight=100)))
    Rollout.objects.filter(pk=rollout.pk).update(
        plan=plan.model_dump(mode="json"), step_index=1, step_started_at=timezone.now()
    )
    rollout.refresh_from_db()


def test_the_evidence_of_earlier_judged_steps_carries_into_the_next(running: Rollout) -> None:
    traffic(running, "baseline", 600, seed=41, step=0)
    traffic(running, "canary", 600, seed=42, step=0)
    first = RequestSample.objects.filter(rollout_id=running.pk, arm="canary", step=0).first()
    assert first is not None
    Feedback.objects.create(sample=first, value="up")
    two_judged_steps(running)
    traffic(running, "baseline", 400, seed=43, step=1)
    traffic(running, "canary", 400, seed=44, step=1)
    look = step_look(running, now=timezone.now(), final=False)
    assert look is not None
    assert (look.step, look.window.first_step, look.window.steps) == (1, 0, (0, 1))
    assert look.report.verdict("error_rate").n_candidate == 1000
    assert look.report.verdict("error_rate").n_baseline == 1000
    # Without a control arm, latencies compare the 50% step alone: at 5% the arms' loads differ.
    assert look.report.verdict("ttft_p50").n_candidate == 400
    assert look.report.verdict("ttft_p50").n_baseline == 400
    assert look.window.feedback["canary"] == (1, 0)  # feedback on a request of the 5% step
    # The guardrails still read the step's own samples.
    assert decide(running).evidence["canary"]["samples"] == 400  # type: ignore[index]


def test_a_verdict_of_a_later_step_is_reproduced_from_every_step_it_read(
    running: Rollout,
) -> None:
    traffic(running, "baseline", 600, seed=45, step=0)
    traffic(running, "canary", 600, seed=46, step=0)
    two_judged_steps(running)
    traffic(running, "baseline", 400, seed=47, step=1)
    traffic(running, "canary", 400, seed=48, step=1)
    decide(running, record=True)
    verdict = Verdict.objects.get(rollout=running, step=1)
    assert verdict.window["first_step"] == 0
    traffic(running, "canary", 300, seed=49, step=1, ttft_scale=3.0)  # after the look
    assert recompute(verdict).to_dict() == verdict.report
    by_metric = {v["metric"]: v for v in verdict.report["verdicts"]}
    assert by_metric["error_rate"]["n_candidate"] == 1000
    assert by_metric["ttft_p50"]["n_candidate"] == 400  # the 50% step's alone (no control arm)


def test_a_verdict_stored_before_evidence_carried_reads_its_own_step_alone(
    running: Rollout,
) -> None:
    traffic(running, "canary", 600, seed=50, step=0)
    two_judged_steps(running)
    traffic(running, "canary", 400, seed=51, step=1)
    window = selectors.Window.from_dict(
        {"rollout": running.pk, "step": 1, "max_sample_id": 2**62, "feedback": {}}
    )
    assert window.steps == (1, 1)
    assert len(selectors.window_samples(window)["canary"]) == 400
    carried = replace(window, first_step=0)
    assert len(selectors.window_samples(carried)["canary"]) == 1000


def test_the_guardrails_of_the_100_percent_step_read_its_own_samples_alone(
    running: Rollout,
) -> None:
    # The 10% step's requests were slow to the first token: over the 300 ms gate, pooled.
    traffic(running, "canary", 600, seed=52, step=0, ttft_scale=10.0)
    Rollout.objects.filter(pk=running.pk).update(
        step_index=1, step_started_at=timezone.now() - dt.timedelta(seconds=60)
    )
    running.refresh_from_db()
    stored(running, "canary", 60)
    decision = decide(running)
    assert decision.action == "promote", decision.reason
    assert decision.evidence["canary"]["samples"] == 60  # type: ignore[index]


def test_a_steps_first_final_look_is_scheduled_kept_and_never_scheduled_again(
    running: Rollout,
) -> None:
    traffic(running, "baseline", 60, seed=50)
    traffic(running, "canary", 60, seed=51)
    baked(running)
    first = decide(running, record=True)  # short of the judge's samples: it waits
    assert first.action == "hold"
    kept = Verdict.objects.get(rollout=running)
    assert (kept.final, kept.report["scheduled"]) == (True, True)
    # The next ticks read the anytime-valid bounds alone; a look changing nothing is not kept.
    second = decide(running, record=True)
    assert second.report is not None
    assert second.report.final
    assert not second.report.scheduled
    assert Verdict.objects.filter(rollout=running).count() == 1
    # A stored scheduled look recomputes as one.
    assert recompute(kept).scheduled
