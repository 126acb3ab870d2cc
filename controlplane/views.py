from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from controlplane.health import CHECKS, gateway_snapshot_left_out, run_check, worker_heartbeat
from tenants.web import SignedInRequest


@require_GET
@login_required
def home(request: SignedInRequest) -> HttpResponse:
    """The landing page; with htmx it returns only the service-status fragment it polls."""
    # The rows name tenants: release managers only.
    release_manager = request.user.is_release_manager
    context = {
        "checks": {name: run_check(check) for name, check in CHECKS.items()},
        "workers": worker_heartbeat(),
        "gateway_url": settings.PUBLIC_GATEWAY_URL,
        "left_out": gateway_snapshot_left_out() if release_manager else None,
    }
    template = "controlplane/home.html"
    if request.htmx:
        template += "#service-status"
    return render(request, template, context)
