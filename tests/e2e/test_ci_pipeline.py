"""The release workflow (.github/workflows/release.yml) run for real: its `run:` steps, as a
GitHub runner runs them (tests/docs/workflow.py), call the installed `tollgate` console script
against a live control plane (pytest-django's live_server), with simfleet replicas, a gateway,
a Celery worker with beat, and 40 requests/s through the gateway.

From an empty database: a release manager and their pipeline token (`create_api_token ci-bot
--scope all`), then the release manager's one-time setup through the API and the CLI (fleets,
the plan template, v1 deployed as the route's baseline, a tenant and its gateway key). Then the
workflow releases v2 (promoted: exit 0); v3, on a fleet that fails half its requests (rolled
back: exit 1); and v4, which a person pauses while the workflow waits (held: exit 3, then
`tollgate rollout status` and `rollback`). A bad token stops the workflow at its first step with
exit 2. Each phase's wall time is printed as it ends.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from django.conf import settings
from pytest_django.live_server_helper import LiveServer

from evaluation.models import RequestSample
from registry.models import Alias, EvalRun, LineageEdge, ModelArtifact
from rollouts.choices import RolloutState
from rollouts.models import Deployment, Rollout, RolloutEvent, Route
from tests.docs import workflow
from tests.docs.workflow import Runner, StepResult
from tests.e2e.conftest import FAST, Traffic, Worker
from tests.e2e.conftest import ROUTE as TRAFFIC_ROUTE
from tests.e2e.release import (
    TOLLGATE,
    Phases,
    ReleaseManager,
    pipeline_token,
    wait_for_snapshot,
    wait_until,
)
from tests.gateway.conftest import GatewayLauncher
from tests.simfleet.harness import FleetLauncher, model

S = RolloutState
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(540)]

RESULTS = "tests/registry/data/results_2026-11-30T12-00-00.json"
TEMPLATE = "ci-quick"
# Short bakes where the judge has little to say; at 50% the judge decides once it has enough:
# after the bake the engine holds the step while a metric it needs is short of samples.
PLAN_TEMPLATE = {
    "name": TEMPLATE,
    "description": "CI end-to-end: a few minutes",
    "steps": [
        {"weight": 5, "min_bake_s": 3, "min_samples": 10},
        {"weight": 25, "min_bake_s": 3, "min_samples": 10},
        {"weight": 50, "min_bake_s": 60, "min_samples": 200},
        {"weight": 100, "min_bake_s": 3, "min_samples": 10},
    ],
    # simfleet's latencies on a busy 2-core machine: the gates catch a broken candidate (errors),
    # not the machine's load.
    "gates": {"ttft_p95_ms": 2000, "tpot_p95_ms": 500, "max_error_rate": 0.05},
}


def digest(version: str) -> str:
    return "sha256:" + hashlib.sha256(f"support-chat weights {version}".encode()).hexdigest()


@dataclass
class Pipeline:
    """Runs of the workflow's job against one control plane, as workflow_dispatch starts them."""

    flow: workflow.Workflow
    url: str
    token: str
    home: Path
    phases: Phases

    def runner(self, version: str, *, parent: str, fleet: str, token: str | None = None) -> Runner:
        family = self.flow.env["FAMILY"]
        inputs = {
            "version": version,
            "parent": parent,
            "uri": f"s3://models/{family}/{version}",
            "digest": digest(version),
            "eval_results": RESULTS,
            "fleet": fleet,
            "plan_template": TEMPLATE,
        }
        return Runner(
            workflow=self.flow,
            inputs=inputs,
            variables={"TOLLGATE_URL": self.url},
            secrets={"TOLLGATE_TOKEN": token or self.token},
            home=self.home / f"run-{version}",
            log=self.phases.say,
        )

    def release(
        self, version: str, *, parent: str, fleet: str, token: str | None = None
    ) -> tuple[Runner, list[StepResult]]:
        runner = self.runner(version, parent=parent, fleet=fleet, token=token)
        results = runner.run_job(timeout=400)
        if results and results[-1].step.id == "rollout":
            self.phases.say("the rollout step's log:\n" + results[-1].stderr.rstrip())
        return runner, results


def exits(results: list[StepResult]) -> list[tuple[str | None, int]]:
    return [(result.step.id or result.step.name, result.returncode) for result in results]


def transcript(results: list[StepResult]) -> str:
    return "\n".join(result.describe() for result in results)


# --- the tests ---------------------------------------------------------------------------------


def test_the_release_workflow_promotes_rolls_back_and_holds_for_a_person(
    live_server: LiveServer,
    redis_client: redis.Redis,
    launchers: tuple[FleetLauncher, GatewayLauncher],
    tmp_path: Path,
    phases: Phases,
) -> None:
    assert TOLLGATE.exists(), f"{TOLLGATE} is missing: `make venv` installs the project"
    flow = workflow.load()
    family, route_name = flow.env["FAMILY"], flow.env["ROUTE"]
    served = flow.env["SERVED_MODEL_NAME"]
    assert route_name == TRAFFIC_ROUTE, "the traffic generator asks for this route"
    url = str(live_server.url)
    fleets, gateways = launchers
    profile = model(name=served, speed=FAST, answer_tokens=8)
    worker = Worker(tmp_path / "worker.log")
    traffic: Traffic | None = None
    try:
        with phases.phase("setup: token, fleets, v1 as the baseline, tenant, gateway"):
            token = pipeline_token()
            admin = ReleaseManager(url, token, tmp_path)
            pipeline = Pipeline(flow, url, token, tmp_path, phases)
            base = fleets.start([profile], replicas=2)
            cand = fleets.start([profile], replicas=2, seed=5)
            worker.start()
            admin.fleet("base", base.urls)
            admin.fleet("cand", cand.urls)
            admin.post("/plan-templates", PLAN_TEMPLATE)
            admin.tollgate(
                f"artifact register {family}:v1 --uri s3://models/{family}/v1 "
                f"--digest {digest('v1')}"
            )
            deployed = admin.tollgate(
                f"deploy --artifact {family}:v1 --fleet base --served-model-name {served} "
                "--wait --interval 0.5 --timeout 90"
            )
            v1 = int(deployed)
            admin.post("/routes", {"name": route_name, "baseline_deployment": v1})
            admin.tollgate("tenant create acme --name Acme")
            key = admin.post("/tenants/acme/keys", {"name": "traffic"})["secret"]
            gateway = gateways.start(redis_url=settings.REDIS_URL)
            wait_for_snapshot(gateway)
            traffic = Traffic(url=gateway.url, key=str(key), rate=40, with_user=True)
            traffic.start()
            wait_until(
                lambda: traffic is not None and traffic.statuses.count(200) >= 40, 30, "traffic"
            )

        with phases.phase("v2: the workflow (register, evals, deploy, rollout)"):
            runner, results = pipeline.release("v2", parent="v1", fleet="cand")
            assert exits(results) == [
                ("Register the checkpoint and its lineage", 0),
                ("Upload its eval results", 0),
                ("deploy", 0),
                ("rollout", 0),
            ], transcript(results)

        with phases.phase("v2: checks, and the register step rerun"):
            v2 = Deployment.objects.select_related("artifact").get(
                pk=int(runner.outputs["deploy"]["id"])
            )
            assert (str(v2.artifact), v2.fleet.name, v2.state) == (f"{family}:v2", "cand", "ready")
            rollout = Rollout.objects.get(pk=int(runner.outputs["rollout"]["id"]))
            assert rollout.candidate_id == v2.pk
            last = rollout.events.last()
            assert rollout.state == S.PROMOTED, last.reason if last else rollout.state
            assert rollout.parsed_plan.steps[2].min_bake_s == 60, "the plan template's steps"
            route = Route.objects.get(name=route_name)
            assert (route.baseline_id, route.canary_id) == (v2.pk, None)
            steps = list(
                RolloutEvent.objects.filter(rollout=rollout).values_list("to_state", "step_index")
            )
            assert steps[-5:] == [
                (S.RUNNING, 0),
                (S.RUNNING, 1),
                (S.RUNNING, 2),
                (S.RUNNING, 3),
                (S.PROMOTED, 3),
            ], steps
            artifact = ModelArtifact.objects.get(family=family, version="v2")
            edge = LineageEdge.objects.get(child=artifact)
            assert (edge.parent.version, edge.relation) == ("v1", "finetune")
            assert EvalRun.objects.filter(artifact=artifact).count() == 1
            assert Alias.objects.get(family=family, name="production").artifact_id == artifact.pk
            assert RequestSample.objects.filter(rollout_id=rollout.pk, arm="canary").exists()
            phases.say(f"v2: {rollout.state} - {last.reason if last else ''}")
            # A rerun of a job that failed later registers nothing twice.
            register = next(step for step in flow.steps if step.calls_tollgate)
            again = runner.run(register, timeout=60)
            assert again.returncode == 0, again.describe()
            assert ModelArtifact.objects.filter(family=family, version="v2").count() == 1
            summary = tmp_path / "run-v2" / f"step-{flow.step('rollout').index}.github_step_summary"
            assert (
                f"rollout {rollout.pk} of {family}:v2 on {route_name}: exit 0"
                in summary.read_text()
            )

        with phases.phase("v3: the workflow on a fleet failing half its requests"):
            bad = fleets.start([profile], replicas=1, faults={"error_rate": 0.5}, seed=7)
            admin.fleet("bad", bad.urls)
            runner, results = pipeline.release("v3", parent="v2", fleet="bad")
            assert [code for _, code in exits(results)] == [0, 0, 0, 1], transcript(results)
            rollout = Rollout.objects.get(pk=int(runner.outputs["rollout"]["id"]))
            assert rollout.state == S.ROLLED_BACK
            event = RolloutEvent.objects.get(rollout=rollout, to_state=S.ROLLED_BACK)
            assert f"rollout {rollout.pk} rolled_back: {event.reason}" in results[-1].stderr
            route = Route.objects.get(name=route_name)
            assert (route.baseline_id, route.canary_id) == (v2.pk, None)
            assert Alias.objects.get(family=family, name="production").artifact.version == "v2"
            phases.say(f"v3: {rollout.state} - {event.reason}")

        with phases.phase("v4: paused by a person while the workflow waits, then rolled back"):
            held = fleets.start([profile], replicas=1, seed=9)
            admin.fleet("held", held.urls)
            runner = pipeline.runner("v4", parent="v2", fleet="held")
            job: list[StepResult] = []
            waiting = threading.Thread(target=lambda: job.extend(runner.run_job(timeout=330)))
            waiting.start()
            try:
                wait_until(
                    lambda: Rollout.objects.filter(
                        state=S.RUNNING, route__name=route_name
                    ).exists(),
                    120,
                    "v4's rollout running",
                )
                live = Rollout.objects.get(state=S.RUNNING, route__name=route_name)
                admin.tollgate(f"rollout pause {live.pk} --reason 'a person looks first'")
            finally:
                waiting.join(timeout=330)
            assert [code for _, code in exits(job)] == [0, 0, 0, 3], transcript(job)
            assert runner.outputs["rollout"]["id"] == str(live.pk)
            assert f"::warning::rollout {live.pk} is held for a person" in job[-1].stdout
            assert "held for a person: pause: a person looks first" in job[-1].stderr
            assert "paused" in admin.tollgate(f"rollout status {live.pk}")
            admin.tollgate(f"rollout rollback {live.pk} --reason 'not this week'")
            live.refresh_from_db()
            assert live.state == S.ROLLED_BACK
            route = Route.objects.get(name=route_name)
            assert (route.baseline_id, route.canary_id) == (v2.pk, None)
    finally:
        if traffic is not None:
            traffic.stop()
        worker.stop()
    assert traffic is not None
    assert 0 not in traffic.statuses, "the gateway dropped connections"


def test_a_bad_token_stops_the_workflow_at_its_first_step_with_exit_2(
    live_server: LiveServer, tmp_path: Path, phases: Phases
) -> None:
    pipeline = Pipeline(workflow.load(), str(live_server.url), "unused", tmp_path, phases)
    with phases.phase("the workflow with a bad token"):
        _, results = pipeline.release("v2", parent="v1", fleet="cand", token="tg_" + "0" * 43)
    assert len(results) == 1, "the job stops at its first failing step"
    result = results[0]
    phases.say("its stderr:\n" + result.stderr.rstrip())
    assert result.returncode == 2, result.describe()
    assert "answered 401" in result.stderr, result.describe()
    assert "set TOLLGATE_TOKEN to a valid token" in result.stderr, "it says what to fix"
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert not ModelArtifact.objects.exists()
