from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from orchestration.gateway_snapshot import publish_snapshot
from rollouts.choices import LIVE_STATES
from rollouts.models import Deployment, PlanTemplate, Rollout, Route
from rollouts.seed import CANDIDATE_FLEET, CONTROL_FLEET, ROUTE
from rollouts.services.rollouts import rollout_create, rollout_start
from tenants.models import User


class Command(BaseCommand):
    help = "Start a live canary of the demo candidate (support-chat v2) unless one is running."

    def handle(self, *args: Any, **options: Any) -> None:
        route = Route.objects.get(name=ROUTE)
        live = Rollout.objects.filter(route=route, state__in=LIVE_STATES).first()
        if live is None:
            candidate = Deployment.objects.get(
                fleet__name=CANDIDATE_FLEET, artifact__version="v2", state="ready"
            )
            if route.baseline_id == candidate.pk:
                self.stdout.write("The demo candidate is already in production.")
                publish_snapshot()
                return
            manager = User.objects.get(username="release")
            template = PlanTemplate.objects.get(name="demo")  # made by seed_demo
            live = rollout_create(
                actor=manager,
                route=route,
                candidate=candidate,
                plan=template.parsed_plan,
                gates=template.parsed_gates,
                # v1's second copy beside the canary: latencies compared at equal load.
                control=_control(route),
            )
            rollout_start(actor=manager, rollout_id=live.pk)
        url = f"{settings.PUBLIC_WEB_URL}/rollouts/{live.pk}/"
        self.stdout.write(f"Live canary: rollout {live.pk} of support-chat v2, watch it at {url}")


def _control(route: Route) -> Deployment | None:
    """The baseline's copy on the control fleet, when it is ready (v1's; once v2 is the baseline
    there is none, and a rollout goes without a control)."""
    return Deployment.objects.filter(
        fleet__name=CONTROL_FLEET, artifact=route.baseline.artifact, state="ready"
    ).first()
