from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from controlplane.health import CHECKS, run_check, worker_heartbeat
from controlplane.http import HtmxHttpRequest


@require_GET
@login_required
def home(request: HtmxHttpRequest) -> HttpResponse:
    """The landing page; with htmx it returns only the service-status fragment it polls."""
    context = {
        "checks": {name: run_check(check) for name, check in CHECKS.items()},
        "workers": worker_heartbeat(),
        "gateway_url": settings.PUBLIC_GATEWAY_URL,
    }
    template = "controlplane/home.html"
    if request.htmx:
        template += "#service-status"
    return render(request, template, context)
