"""The tenants' pages: the list of tenants by usage (release managers, viewers), a tenant's quota
dashboard with its keys, the budget editor with its confirmation step, and a usage export.

A tenant admin sees their own tenant only: every view fetches the tenant through
`selectors.tenant_get`, so another tenant's URL is a 404 exactly like a tenant that does not exist.
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Iterator
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from core.errors import DomainError
from tenants import selectors
from tenants.charts import Chart, line_chart
from tenants.forms import ApiKeyCreateForm, ApiTokenCreateForm, BudgetForm, TenantCreateForm
from tenants.gauges import gauges
from tenants.models import Budget, Tenant, User
from tenants.services import accounts, budgets, gateway_keys
from tenants.web import SignedInRequest, domain_errors_as_http, release_manager, wants_fragment

TIME_FORMATS = {"hour": "%H:%M", "day": "%H:00", "month": "%m-%d"}


def _tenant(request: SignedInRequest, slug: str) -> Tenant:
    with domain_errors_as_http():
        return selectors.tenant_get(request.user, slug)


def dashboard_url(tenant: Tenant) -> str:
    return reverse("tenants:tenant-dashboard", args=[tenant.slug])


# --- the list -------------------------------------------------------------------------------------


@require_GET
@login_required
def tenant_list(request: SignedInRequest) -> HttpResponse:
    user = request.user
    if user.is_tenant_admin and user.tenant is not None:
        return redirect(dashboard_url(user.tenant))
    sort = request.GET.get("sort", "usage")
    if sort not in selectors.OVERVIEW_SORTS:
        sort = "usage"
    search = request.GET.get("q", "").strip()[:100]
    context = {
        "rows": selectors.tenants_overview(user, sort=sort, search=search),
        "search": search,
        "sort": sort,
        "sorts": [("usage", "By usage"), ("rejections", "By rejections")],
    }
    return render(request, "tenants/tenant_list.html", context)


@require_http_methods(["GET", "POST"])
@login_required
def tenant_create(request: SignedInRequest) -> HttpResponse:
    actor = release_manager(request, to="create tenants")
    form = TenantCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            tenant = accounts.tenant_onboard(
                actor=actor,
                slug=form.cleaned_data["slug"],
                name=form.cleaned_data["name"],
                tier=form.cleaned_data["tier"],
                fail_mode=form.cleaned_data["fail_mode"],
                limits=form.limits(),
            )
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Tenant {tenant.name} is created; give it keys below.")
            return redirect(dashboard_url(tenant))
    status = 400 if request.method == "POST" else 200
    return render(request, "tenants/tenant_create.html", {"form": form}, status=status)


# --- a tenant's dashboard -------------------------------------------------------------------------


def _charts(series: selectors.Series) -> list[Chart]:
    fmt = TIME_FORMATS[series.window.name]
    buckets = series.buckets
    rejections = {
        reason: [float(v) for v in values] for reason, values in series.rejections.items()
    }
    return [
        line_chart(
            "Tokens",
            buckets,
            {"in": series.column("tokens_in"), "out": series.column("tokens_out")},
            time_format=fmt,
        ),
        line_chart(
            "Requests",
            buckets,
            {"served": series.column("requests"), "errors": series.column("errors")},
            time_format=fmt,
        ),
        line_chart(
            "Rejections by limit",
            buckets,
            rejections or {"none": [0.0] * len(buckets)},
            time_format=fmt,
        ),
        line_chart(
            "Cost", buckets, {"dollars": series.column("cost")}, time_format=fmt, money=True
        ),
    ]


def _dashboard_context(request: SignedInRequest, tenant: Tenant, **extra: Any) -> dict[str, Any]:
    window_name = request.GET.get("range", selectors.DEFAULT_WINDOW)
    window = selectors.WINDOWS.get(window_name) or selectors.WINDOWS[selectors.DEFAULT_WINDOW]
    series = selectors.usage_series(tenant, window)
    budget = selectors.budget_of(tenant)
    can_manage_keys = selectors.may_manage_keys(request.user, tenant)
    context: dict[str, Any] = {
        "tenant": tenant,
        "budget": budget,
        "gauges": gauges(tenant, budget),
        "window": window,
        "windows": list(selectors.WINDOWS.values()),
        "series": series,
        "totals": series.overall,
        "charts": _charts(series),
        "by_route": selectors.usage_by_route(tenant, window),
        "rejections": selectors.recent_rejections(tenant),
        "keys": selectors.api_keys(tenant) if can_manage_keys else None,
        "can_manage_keys": can_manage_keys,
        "can_edit_budget": selectors.may_edit_budgets(request.user),
        "now": timezone.now(),
    }
    if can_manage_keys and "key_form" not in extra:
        context["key_form"] = ApiKeyCreateForm(routes=selectors.routes_open_to(tenant))
    context.update(extra)
    return context


@require_GET
@login_required
@vary_on_headers("HX-Request")
def tenant_dashboard(request: SignedInRequest, slug: str) -> HttpResponse:
    tenant = _tenant(request, slug)
    template = "tenants/tenant_dashboard.html"
    if wants_fragment(request):
        template += "#usage-charts"
    return render(request, template, _dashboard_context(request, tenant))


# --- API keys -------------------------------------------------------------------------------------


def _key_manager(request: SignedInRequest, slug: str) -> tuple[User, Tenant]:
    tenant = _tenant(request, slug)
    if not selectors.may_manage_keys(request.user, tenant):
        raise PermissionDenied("only this tenant's admins and release managers manage its keys")
    return request.user, tenant


@require_POST
@login_required
def api_key_create(request: SignedInRequest, slug: str) -> HttpResponse:
    actor, tenant = _key_manager(request, slug)
    form = ApiKeyCreateForm(request.POST, routes=selectors.routes_open_to(tenant))
    if form.is_valid():
        try:
            key, secret = gateway_keys.api_key_create(
                actor=actor,
                tenant=tenant,
                name=form.cleaned_data["name"],
                allowed_routes=form.cleaned_data["allowed_routes"],
                expires_at=form.cleaned_data["expires_at"],
            )
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            # Rendered, not redirected: the secret must never travel through a session or a URL.
            context = _dashboard_context(request, tenant, new_key=key, new_secret=secret)
            response = render(request, "tenants/tenant_dashboard.html", context, status=201)
            response["Cache-Control"] = "no-store"
            return response
    context = _dashboard_context(request, tenant, key_form=form)
    return render(request, "tenants/tenant_dashboard.html", context, status=400)


@require_POST
@login_required
def api_key_revoke(request: SignedInRequest, slug: str, key_id: int) -> HttpResponse:
    actor, tenant = _key_manager(request, slug)
    with domain_errors_as_http():
        key = selectors.api_key_get(tenant, key_id)
    gateway_keys.api_key_revoke(actor=actor, key_id=key.pk)
    messages.success(request, f"Key {key.name} ({key.prefix}…) is revoked.")
    return redirect(dashboard_url(tenant) + "#keys")


# --- budgets --------------------------------------------------------------------------------------


def _display(budget: Budget, name: str, value: Any) -> str:
    if value is None or value == "":
        return "no limit" if name not in ("soft_limit_route",) else "none"
    field = budget._meta.get_field(name)
    choices = dict(getattr(field, "choices", None) or ())
    return str(choices.get(value, f"{value:,}" if isinstance(value, int) else value))


@require_http_methods(["GET", "POST"])
@login_required
def budget_edit(request: SignedInRequest, slug: str) -> HttpResponse:
    """Editing is two steps: the form, then a page that shows each change (old → new) and saves
    only when confirmed. Nothing is written before the confirmation."""
    tenant = _tenant(request, slug)
    if not selectors.may_edit_budgets(request.user):
        raise PermissionDenied("only release managers change budgets")
    current = selectors.budget_of(tenant)
    routes = selectors.routes_open_to(tenant)
    if request.method == "GET":
        form = BudgetForm(instance=selectors.budget_of(tenant), routes=routes)
        return render(request, "tenants/budget_edit.html", {"tenant": tenant, "form": form})
    form = BudgetForm(request.POST, instance=selectors.budget_of(tenant), routes=routes)
    if not form.is_valid():
        context = {"tenant": tenant, "form": form}
        return render(request, "tenants/budget_edit.html", context, status=400)
    limits = form.limits()
    changes = [
        (name, _display(current, name, getattr(current, name)), _display(current, name, value))
        for name, value in limits.items()
        if (getattr(current, name) or None) != (value or None)
    ]
    if not form.cleaned_data["confirmed"] or not changes:
        confirm: dict[str, Any] = {"tenant": tenant, "form": form}
        # The confirmation saves only over the budget shown here (compare-and-set).
        confirm.update(changes=changes, confirming=True, version=budgets.budget_version(current))
        return render(request, "tenants/budget_edit.html", confirm)
    try:
        budgets.budget_set_confirmed(
            actor=request.user,
            tenant=tenant,
            reason=form.cleaned_data["reason"],
            expected_version=form.cleaned_data["reviewed_version"] or "new",
            limits=limits,
        )
    except DomainError as exc:
        form.add_error(None, str(exc))
        context = {"tenant": tenant, "form": form}
        return render(request, "tenants/budget_edit.html", context, status=exc.status_code)
    messages.success(request, f"Budget of {tenant.name} saved ({len(changes)} changes).")
    return redirect(dashboard_url(tenant))


# --- export ---------------------------------------------------------------------------------------


class _Echo:
    def write(self, value: str) -> str:
        return value


@require_GET
@login_required
def usage_export(request: SignedInRequest, slug: str) -> StreamingHttpResponse:
    """The tenant's hour rows of the last 30 days as CSV, for spreadsheets and invoices."""
    tenant = _tenant(request, slug)
    since = timezone.now() - dt.timedelta(days=30)
    rows = selectors.usage_rows(tenant, since)
    writer = csv.writer(_Echo())
    header = ["hour_utc", "route", "arm", "deployment", "requests", "tokens_in", "tokens_out"]
    header += ["errors", "rejected", "cost_dollars"]

    def lines() -> Iterator[str]:
        yield writer.writerow(header)
        for bucket, *counts, cost in rows.iterator(chunk_size=2000):
            yield writer.writerow([bucket.isoformat(), *counts, f"{cost:.6f}"])

    response = StreamingHttpResponse(lines(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="usage-{tenant.slug}.csv"'
    return response


# --- the signed-in person's own API tokens ----------------------------------------------------


def _tokens_page(request: SignedInRequest, *, status: int = 200, **context: Any) -> HttpResponse:
    context.setdefault("token_form", ApiTokenCreateForm(role=request.user.role))
    context["tokens"] = selectors.api_tokens_of(request.user)
    context["now"] = timezone.now()
    response = render(request, "tenants/api_tokens.html", context, status=status)
    response["Cache-Control"] = "no-store"
    return response


@require_GET
@login_required
def api_tokens(request: SignedInRequest) -> HttpResponse:
    return _tokens_page(request)


@require_POST
@login_required
def api_token_create(request: SignedInRequest) -> HttpResponse:
    form = ApiTokenCreateForm(request.POST, role=request.user.role)
    if form.is_valid():
        try:
            token, secret = accounts.api_token_create(
                actor=request.user,
                user=request.user,
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                expires_at=form.cleaned_data["expires_at"],
            )
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            # Rendered, not redirected: the secret must never travel through a session or a URL.
            return _tokens_page(request, status=201, new_token=token, new_secret=secret)
    return _tokens_page(request, status=400, token_form=form)


@require_POST
@login_required
def api_token_revoke(request: SignedInRequest, token_id: int) -> HttpResponse:
    with domain_errors_as_http():
        token = selectors.api_token_of(request.user, token_id)
    accounts.api_token_revoke(actor=request.user, token_id=token.pk)
    messages.success(request, f"Token {token.name} ({token.prefix}…) is revoked.")
    return redirect(reverse("api-tokens-page"))
