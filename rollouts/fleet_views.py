"""Fleets, their replicas and deployments, for release managers (viewers read):
plain forms that work without JS, each through the audited services the API uses. A tenant admin
has no business here (403)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from core.errors import DomainError
from rollouts import engine_gauges, selectors
from rollouts.choices import DeploymentState
from rollouts.forms import DeploymentForm, FleetForm, ReplicaForm
from rollouts.models import Deployment
from rollouts.services import deployments, fleets
from tenants.web import SignedInRequest, domain_errors_as_http, release_manager

FORMS = {"fleet_form": FleetForm, "replica_form": ReplicaForm, "deployment_form": DeploymentForm}


def _page(request: SignedInRequest, *, status: int = 200, **forms: Any) -> HttpResponse:
    if request.user.is_tenant_admin:
        raise PermissionDenied("fleets are for release managers and viewers")
    live = (
        Deployment.objects.exclude(state=DeploymentState.RETIRED)
        .select_related("artifact", "fleet")
        .order_by("fleet__name", "-created_at")
    )
    visible = list(selectors.visible_fleets(request.user))
    # What each replica's engine reports through Prometheus, read once for the page.
    gauges = engine_gauges.replica_gauges(
        replica.base_url for fleet in visible for replica in fleet.replicas.all()
    )
    context: dict[str, Any] = {
        "fleets": [
            (fleet, [(r, (gauges or {}).get(r.base_url)) for r in fleet.replicas.all()])
            for fleet in visible
        ],
        "gauges_unavailable": gauges is None,
        "deployments": live,
        "preparing": any(d.state == DeploymentState.PENDING for d in live),
        "may_edit": request.user.is_release_manager,
    }
    for name, form in FORMS.items():
        context[name] = forms.get(name) or form()
    return render(request, "rollouts/fleet_list.html", context, status=status)


def _done(request: SignedInRequest, message: str) -> HttpResponse:
    messages.success(request, message)
    return redirect(reverse("rollouts:fleet-list"))


@require_GET
@login_required
def fleet_list(request: SignedInRequest) -> HttpResponse:
    return _page(request)


@require_POST
@login_required
def fleet_create(request: SignedInRequest) -> HttpResponse:
    actor = release_manager(request, to="create fleets")
    form = FleetForm(request.POST)
    if form.is_valid():
        try:
            fleet = fleets.fleet_create(actor=actor, **form.cleaned_data)
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            return _done(request, f"Fleet {fleet.name} is created; add its replicas.")
    return _page(request, status=400, fleet_form=form)


@require_POST
@login_required
def replica_add(request: SignedInRequest, name: str) -> HttpResponse:
    actor = release_manager(request, to="add replicas")
    with domain_errors_as_http():
        fleet = selectors.fleet_for(request.user, name)
    form = ReplicaForm(request.POST)
    if form.is_valid():
        try:
            replica = fleets.replica_add(actor=actor, fleet=fleet, **form.cleaned_data)
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            return _done(request, f"Replica {replica} is added.")
    return _page(request, status=400, replica_form=form)


@require_POST
@login_required
def replica_change(request: SignedInRequest, name: str, replica: str, action: str) -> HttpResponse:
    """`action`: drain (out of routing, in-flight requests finish) or remove."""
    if action not in ("drain", "remove"):
        raise Http404(f"no replica action {action!r}: drain or remove")
    actor = release_manager(request, to="change replicas")
    with domain_errors_as_http():
        found = selectors.replica_of(request.user, name, replica)
    try:
        if action == "drain":
            fleets.replica_drain(actor=actor, replica_id=found.pk)
        else:
            fleets.replica_remove(actor=actor, replica_id=found.pk)
    except DomainError as exc:
        messages.error(request, str(exc))
        return _page(request, status=exc.status_code)
    return _done(request, f"Replica {found} is {'draining' if action == 'drain' else 'removed'}.")


@require_POST
@login_required
def deployment_create(request: SignedInRequest) -> HttpResponse:
    actor = release_manager(request, to="create deployments")
    form = DeploymentForm(request.POST)
    if form.is_valid():
        try:
            deployment = deployments.deployment_create(actor=actor, **form.cleaned_data)
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            return _done(
                request, f"Deployment {deployment.pk} is pending: it is being loaded and probed."
            )
    return _page(request, status=400, deployment_form=form)


@require_POST
@login_required
def deployment_delete(request: SignedInRequest, deployment_id: int) -> HttpResponse:
    actor = release_manager(request, to="delete deployments")
    try:
        deployment = deployments.deployment_delete(actor=actor, deployment_id=deployment_id)
    except Deployment.DoesNotExist:
        messages.error(request, f"no deployment {deployment_id}")
        return _page(request, status=404)
    except DomainError as exc:
        messages.error(request, str(exc))
        return _page(request, status=exc.status_code)
    return _done(request, f"Deployment {deployment.pk} is {deployment.state}.")
