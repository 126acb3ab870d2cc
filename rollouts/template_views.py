"""Saved plan templates: every role reads them; release managers save, edit and delete them.
The rollout create form offers them (see views.rollout_create)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import DomainError
from rollouts import selectors
from rollouts.forms import PlanTemplateCreateForm, PlanTemplateForm, describe_gates
from rollouts.models import PlanTemplate
from rollouts.services import templates as services
from tenants.web import SignedInRequest, domain_errors_as_http, release_manager


def _template_or_404(name: str) -> PlanTemplate:
    with domain_errors_as_http():
        return selectors.plan_template_named(name)


def template_url(template: PlanTemplate) -> str:
    return reverse("rollouts:template-detail", args=[template.name])


@require_http_methods(["GET", "POST"])
@login_required
def template_list(request: SignedInRequest) -> HttpResponse:
    """The templates, and for release managers a form that saves a new one."""
    may_edit = request.user.is_release_manager
    form = PlanTemplateCreateForm() if may_edit else None
    status = 200
    if request.method == "POST":
        actor = release_manager(request, to="save plan templates")
        form = PlanTemplateCreateForm(request.POST)
        if form.is_valid():
            values = form.cleaned_data
            try:
                template = services.plan_template_create(
                    actor=actor,
                    name=values["name"],
                    description=values["description"],
                    plan=values["plan"],
                    gates=values["gates"],
                )
            except DomainError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Plan template {template.name} saved.")
                return redirect(template_url(template))
        status = 400
    rows = [
        (template, describe_gates(template.parsed_gates)) for template in selectors.plan_templates()
    ]
    context = {"rows": rows, "form": form, "may_edit": may_edit}
    return render(request, "rollouts/template_list.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def template_detail(request: SignedInRequest, name: str) -> HttpResponse:
    """A template; release managers edit it in place (rollouts already created keep their copy)."""
    template = _template_or_404(name)
    may_edit = request.user.is_release_manager
    form = PlanTemplateForm(template=template)
    status = 200
    if request.method == "POST":
        actor = release_manager(request, to="save plan templates")
        form = PlanTemplateForm(request.POST, template=template)
        if form.is_valid():
            values = form.cleaned_data
            try:
                services.plan_template_update(
                    actor=actor,
                    name=template.name,
                    description=values["description"],
                    plan=values["plan"],
                    gates=values["gates"],
                )
            except DomainError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Plan template {template.name} saved.")
                return redirect(template_url(template))
        status = 400
    context = {
        "template": template,
        "gates": describe_gates(template.parsed_gates),
        "form": form,
        "may_edit": may_edit,
    }
    return render(request, "rollouts/template_detail.html", context, status=status)


@require_POST
@login_required
def template_delete(request: SignedInRequest, name: str) -> HttpResponse:
    actor = release_manager(request, to="delete plan templates")
    template = _template_or_404(name)
    services.plan_template_delete(actor=actor, name=template.name)
    messages.success(request, f"Plan template {name} deleted.")
    return redirect("rollouts:template-list")
