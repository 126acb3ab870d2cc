"""The rollouts' pages: the list, a rollout's page (live while it runs), the manual controls and
the create form. Each role reads the rollouts of the routes it may see (`selectors.visible_routes`:
a tenant admin only those open to their tenant); only release managers start or steer one.

Each view renders the whole page, or with htmx only the fragment (a template partial) it swaps;
the rows a rollout's page draws (timeline, gates, actions) are built in `presentation`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Case, IntegerField, Value, When
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HTMX_STOP_POLLING

from core.errors import DomainError
from evaluation.step_stats import step_stats
from orchestration import engine
from registry.selectors import gates_check
from rollouts import selectors
from rollouts.choices import LIVE_STATES, TERMINAL_STATES, RolloutState
from rollouts.forms import (
    RolloutActionForm,
    RolloutCreateForm,
    RolloutFilterForm,
    candidate_deployments,
)
from rollouts.models import Deployment, Rollout
from rollouts.presentation import ACTION_LABELS, allowed_actions, gate_rows, timeline
from rollouts.services import rollouts as services
from tenants.web import SignedInRequest, release_manager, wants_fragment

S = RolloutState
PAGE_SIZE = 50
# The rollout page polls this often while the rollout is live; the engine ticks every 2 s.
POLL_EVERY = "2s"


def rollout_url(rollout: Rollout) -> str:
    return reverse("rollouts:rollout-detail", args=[rollout.pk])


# --- the list -------------------------------------------------------------------------------------


@require_GET
@login_required
@vary_on_headers("HX-Request")
def rollout_list(request: SignedInRequest) -> HttpResponse:
    """Live rollouts first, then the rest newest first. The state tabs refresh only the rows with
    htmx; without JS they are plain links to this URL."""
    form = RolloutFilterForm(request.GET)
    form.is_valid()  # an unknown filter is dropped and flagged
    state = form.cleaned_data.get("state", "")
    queryset = selectors.rollout_list(user=request.user, state="live" if state == "live" else "")
    if state == "terminal":
        queryset = queryset.filter(state__in=TERMINAL_STATES)
    queryset = queryset.annotate(
        ended=Case(
            When(state__in=TERMINAL_STATES, then=Value(1)),
            default=Value(0),
            output_field=IntegerField(),
        )
    ).order_by("ended", "-created_at", "-id")
    page = Paginator(queryset, PAGE_SIZE).get_page(request.GET.get("page"))
    context: dict[str, Any] = {
        "form": form,
        "page": page,
        "state": state,
        "tabs": [("", "All"), ("live", "Live"), ("terminal", "Ended")],
        "live_states": LIVE_STATES,
        "can_create": request.user.is_release_manager,
    }
    template = "rollouts/rollout_list.html"
    if wants_fragment(request):
        template += "#rollout-rows"
    return render(request, template, context)


# --- a rollout's page -----------------------------------------------------------------------------


def _marker(rollout: Rollout) -> str:
    """What the controls were drawn for: a poll that finds something else redraws them."""
    return f"{rollout.state}:{rollout.step_index}"


def _rollout_or_404(request: SignedInRequest, rollout_id: int) -> Rollout:
    """The rollout, if the user may see its route; otherwise it does not exist for them."""
    rollout = (
        selectors.visible_rollouts(request.user)
        .select_related(
            "route",
            "baseline__artifact",
            "baseline__fleet",
            "candidate__artifact",
            "candidate__fleet",
            "created_by",
        )
        .filter(pk=rollout_id)
        .first()
    )
    if rollout is None:
        raise Http404(f"rollout {rollout_id} does not exist")
    return rollout


def _live_context(rollout: Rollout, now: dt.datetime) -> dict[str, Any]:
    plan = rollout.parsed_plan
    gates = rollout.parsed_gates
    stats = step_stats(rollout)
    decision = None
    judgment: object = None
    if rollout.state == S.RUNNING:
        # Read-only: what the next tick would do with the samples so far. The tick decides.
        decision = engine.decide(rollout, now=now)
        judge = decision.evidence.get("judge")  # the judge's look, taken by decide() itself
        judgment = judge["summary"] if isinstance(judge, dict) else None
    else:
        judgment = engine.relative_judgment(rollout)
    baked_s = None
    if rollout.step_started_at is not None and rollout.state in LIVE_STATES:
        baked_s = max(0.0, (now - rollout.step_started_at).total_seconds())
    step = plan.steps[rollout.step_index]
    events = list(rollout.events.order_by("-created_at", "-id"))
    return {
        "rollout": rollout,
        "is_live": rollout.state not in TERMINAL_STATES,
        "poll_every": POLL_EVERY,
        "marker": _marker(rollout),
        "timeline": timeline(rollout),
        "step": step,
        "step_number": rollout.step_index + 1,
        "step_count": len(plan.steps),
        "canary_weight": rollout.current_weight,
        "baseline_weight": 100.0 - rollout.current_weight,
        "stats": stats,
        "gate_rows": gate_rows(stats, gates) if stats else [],
        "gates": gates,
        "baked_s": baked_s,
        "decision": decision,
        "relative_judgment": judgment,
        "final_event": events[0] if events and rollout.state in TERMINAL_STATES else None,
        "events": events,
    }


def _controls_context(
    request: SignedInRequest, rollout: Rollout, form: RolloutActionForm | None = None
) -> dict[str, Any]:
    may_steer = request.user.is_release_manager
    actions = allowed_actions(rollout) if may_steer else []
    return {
        "may_steer": may_steer,
        "actions": [(name, ACTION_LABELS[name]) for name in actions],
        "action_form": form or RolloutActionForm(),
    }


def _page_context(
    request: SignedInRequest, rollout: Rollout, form: RolloutActionForm | None = None
) -> dict[str, Any]:
    return _live_context(rollout, timezone.now()) | _controls_context(request, rollout, form)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def rollout_detail(request: SignedInRequest, rollout_id: int) -> HttpResponse:
    """The page; with htmx, the live part it polls. A poll that finds the rollout ended answers
    286 with the final fragment, which htmx swaps in and then stops polling."""
    rollout = _rollout_or_404(request, rollout_id)
    if not wants_fragment(request):
        return render(request, "rollouts/rollout_detail.html", _page_context(request, rollout))
    context = _live_context(rollout, timezone.now())
    # The controls sit outside the polled part so a reason being typed survives each poll; they
    # are redrawn out of band only when the state or step changed under them.
    if request.GET.get("seen") != context["marker"]:
        context |= _controls_context(request, rollout) | {"controls_oob": True}
    response = render(request, "rollouts/rollout_detail.html#rollout-live", context)
    if rollout.state in TERMINAL_STATES:
        response.status_code = HTMX_STOP_POLLING
    return response


@require_POST
@login_required
def rollout_action(request: SignedInRequest, rollout_id: int) -> HttpResponse:
    """Pause, resume, skip, promote, roll back or abort, with a reason. With htmx the answer is
    the whole page body, since the state, timeline, weights, log and controls all change."""
    actor = release_manager(request, to="start or steer a rollout")
    rollout = _rollout_or_404(request, rollout_id)
    form = RolloutActionForm(request.POST)
    ok = False
    if form.is_valid():
        action = form.cleaned_data["action"]
        try:
            services.rollout_control(
                actor=actor,
                rollout_id=rollout.pk,
                action=action,
                reason=form.cleaned_data["reason"],
            )
        except DomainError as exc:
            messages.error(request, str(exc))
        else:
            ok = True
            messages.success(request, f"{ACTION_LABELS[action]}: done.")
    if not wants_fragment(request):
        if ok:
            return redirect(rollout_url(rollout))
        rollout = _rollout_or_404(request, rollout_id)
        context = _page_context(request, rollout, form)
        return render(request, "rollouts/rollout_detail.html", context, status=400)
    rollout = _rollout_or_404(request, rollout_id)
    context = _page_context(request, rollout, None if ok else form)
    return render(request, "rollouts/rollout_detail.html#rollout-page", context)


# --- creating one ---------------------------------------------------------------------------------


def _gates_context(candidate: Deployment | None) -> dict[str, Any]:
    if candidate is None:
        return {"candidate": None, "needs_override": False}
    report = gates_check(candidate.artifact)
    overridden = not report.passed and candidate.artifact.overrides.exists()
    return {
        "candidate": candidate,
        "gate_report": report,
        "overridden": overridden,
        "needs_override": not report.passed and not overridden,
    }


def _chosen(value: str | None) -> Deployment | None:
    if not value or not value.isdigit():
        return None
    return candidate_deployments().filter(pk=int(value)).first()


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def rollout_create(request: SignedInRequest) -> HttpResponse:
    """Route, candidate and plan. Choosing the candidate shows its promotion gates (with htmx at
    once, without it through the 'Check gates' button) before the create button appears; failing
    gates need a written override."""
    actor = release_manager(request, to="start or steer a rollout")
    template = "rollouts/rollout_create.html"
    data = request.POST if request.method == "POST" else request.GET
    # The chosen plan template seeds the step rows (and brings its gates); the form validates it.
    seed = selectors.plan_templates().filter(name=data.get("plan_template") or "").first()
    if request.method == "GET" or "check" in data:
        # Not a submission: the form is drawn from what was chosen so far, without errors.
        form = RolloutCreateForm(initial=data.dict(), seed=seed)
        context: dict[str, Any] = {"form": form, **_gates_context(_chosen(data.get("candidate")))}
        if wants_fragment(request):
            # Two selects swap fragments: the template's the plan, the candidate's its gates.
            plan = request.htmx.target == "plan-steps"
            template += "#plan-steps" if plan else "#candidate-gates"
        return render(request, template, context)

    form = RolloutCreateForm(request.POST, seed=seed)
    valid = form.is_valid()
    context = {"form": form, **_gates_context(form.cleaned_data.get("candidate"))}
    override = form.cleaned_data.get("override_reason", "").strip()
    if valid and context["needs_override"] and not override:
        form.add_error(
            "override_reason",
            "The candidate fails its promotion gates: say why it may roll out anyway.",
        )
        valid = False
    if valid:
        try:
            rollout = services.rollout_create(
                actor=actor,
                route=form.cleaned_data["route"],
                candidate=form.cleaned_data["candidate"],
                control=form.cleaned_data.get("control"),
                plan=form.cleaned_data["plan"],
                gates=form.cleaned_data["gates"],
                # A written override is recorded against the artifact: only when one is needed.
                override_reason=override if context["needs_override"] else "",
            )
        except DomainError as exc:
            form.add_error(None, str(exc))
        else:
            try:
                services.rollout_start(actor=actor, rollout_id=rollout.pk)
            except DomainError as exc:
                messages.error(
                    request, f"Rollout {rollout.pk} was created but did not start: {exc}"
                )
            else:
                messages.success(request, f"Rollout {rollout.pk} started.")
            return redirect(rollout_url(rollout))
    return render(request, template, context, status=400)
