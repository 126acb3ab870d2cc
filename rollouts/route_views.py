"""Routes and their rules. Each role reads the routes it may see (`selectors.visible_routes`) and,
of their rules, those that can apply to it; release managers add and remove rules here, with
plain forms that work without JS."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import DomainError
from rollouts import selectors
from rollouts.choices import DeploymentState
from rollouts.forms import RouteForm, RouteRuleDeleteForm, RouteRuleEditForm, RouteRuleForm
from rollouts.models import Route, RouteRule
from rollouts.services import routes as route_services
from rollouts.services import rules as services
from tenants.models import User
from tenants.web import SignedInRequest, domain_errors_as_http, release_manager


def _route_or_404(request: SignedInRequest, name: str) -> Route:
    with domain_errors_as_http():
        return selectors.route_for(request.user, name)


def _rule_or_404(actor: User, route: Route, name: str) -> RouteRule:
    rule = selectors.visible_rules(actor, route).filter(name=name).first()
    if rule is None:
        raise Http404(f"route {route.name} has no rule named {name!r}")
    return rule


# What a rule matches and where it sends it: the fields its create and edit forms share.
RULE_FIELDS = ("target", "tenants", "tiers", "min_prompt_tokens", "max_prompt_tokens", "order")


def _rule_fields(values: dict[str, Any]) -> dict[str, Any]:
    return {field: values[field] for field in RULE_FIELDS}


def route_url(route: Route) -> str:
    return reverse("rollouts:route-detail", args=[route.name])


def _route_list(
    request: SignedInRequest, form: RouteForm | None = None, status: int = 200
) -> HttpResponse:
    routes = (
        selectors.visible_routes(request.user)
        .select_related("baseline__artifact", "canary__artifact")
        .prefetch_related("tenants")
        .order_by("name")
    )
    rows = [
        (route, selectors.visible_tenant_slugs(request.user, route.tenants.all()))
        for route in routes
    ]
    may_edit = request.user.is_release_manager
    context = {"rows": rows, "route_form": form or (RouteForm() if may_edit else None)}
    return render(request, "rollouts/route_list.html", context, status=status)


@require_GET
@login_required
def route_list(request: SignedInRequest) -> HttpResponse:
    return _route_list(request)


@require_POST
@login_required
def route_create(request: SignedInRequest) -> HttpResponse:
    actor = release_manager(request, to="create routes")
    form = RouteForm(request.POST)
    if form.is_valid():
        values = form.cleaned_data
        try:
            route = route_services.route_create(
                actor=actor,
                name=values["name"],
                baseline=values["baseline"],
                stickiness=values["stickiness"],
                tenant_slugs=[tenant.slug for tenant in values["tenants"]],
            )
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Route {route.name} is created.")
            return redirect(route_url(route))
    return _route_list(request, form, status=400)


def _detail_context(
    request: SignedInRequest,
    route: Route,
    form: RouteRuleForm | None = None,
    delete_form: RouteRuleDeleteForm | None = None,
) -> dict[str, Any]:
    rules = [
        (rule, selectors.visible_tenant_slugs(request.user, rule.tenants.all()))
        for rule in selectors.visible_rules(request.user, route)
    ]
    may_edit = request.user.is_release_manager
    return {
        "route": route,
        "tenants": selectors.visible_tenant_slugs(request.user, route.tenants.all()),
        "rules": rules,
        "ready": DeploymentState.READY,
        "may_edit": may_edit,
        "form": form or (RouteRuleForm() if may_edit else None),
        "delete_form": delete_form or RouteRuleDeleteForm(),
    }


@require_GET
@login_required
def route_detail(request: SignedInRequest, name: str) -> HttpResponse:
    route = _route_or_404(request, name)
    return render(request, "rollouts/route_detail.html", _detail_context(request, route))


@require_POST
@login_required
def route_rule_add(request: SignedInRequest, name: str) -> HttpResponse:
    actor = release_manager(request, to="change route rules")
    route = _route_or_404(request, name)
    form = RouteRuleForm(request.POST)
    if form.is_valid():
        values = form.cleaned_data
        try:
            services.route_rule_create(
                actor=actor, route=route, name=values["name"], **_rule_fields(values)
            )
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Rule {values['name']} added; the gateway follows.")
            return redirect(route_url(route))
    context = _detail_context(request, route, form=form)
    return render(request, "rollouts/route_detail.html", context, status=400)


@require_http_methods(["GET", "POST"])
@login_required
def route_rule_edit(request: SignedInRequest, name: str, rule_name: str) -> HttpResponse:
    """Replaces what a rule matches and where it sends it; its name stays (past samples carry
    it as their arm)."""
    actor = release_manager(request, to="change route rules")
    route = _route_or_404(request, name)
    rule = _rule_or_404(actor, route, rule_name)
    if request.method == "GET":
        form = RouteRuleEditForm(
            initial={
                "target": rule.target_id,
                "tenants": [t.slug for t in rule.tenants.all()],
                "tiers": rule.tiers,
                "min_prompt_tokens": rule.min_prompt_tokens,
                "max_prompt_tokens": rule.max_prompt_tokens,
                "order": rule.order,
            }
        )
        return render(
            request, "rollouts/route_rule_edit.html", {"route": route, "rule": rule, "form": form}
        )
    form = RouteRuleEditForm(request.POST)
    if form.is_valid():
        values = form.cleaned_data
        try:
            services.route_rule_update(actor=actor, rule_id=rule.pk, **_rule_fields(values))
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Rule {rule.name} saved; the gateway follows.")
            return redirect(route_url(route))
    context = {"route": route, "rule": rule, "form": form}
    return render(request, "rollouts/route_rule_edit.html", context, status=400)


@require_POST
@login_required
def route_rule_delete(request: SignedInRequest, name: str, rule_name: str) -> HttpResponse:
    actor = release_manager(request, to="change route rules")
    route = _route_or_404(request, name)
    rule = _rule_or_404(actor, route, rule_name)
    form = RouteRuleDeleteForm(request.POST)
    if not form.is_valid():
        context = _detail_context(request, route, delete_form=form)
        return render(request, "rollouts/route_detail.html", context, status=400)
    services.route_rule_delete(actor=actor, rule_id=rule.pk, reason=form.cleaned_data["reason"])
    messages.success(request, f"Rule {rule_name} removed; its requests rejoin the split.")
    return redirect(route_url(route))
