from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import QuerySet
from django.urls import reverse_lazy
from pydantic import ValidationError as PydanticError

from rollouts.choices import DeploymentState
from rollouts.models import Deployment, Route
from rollouts.plans import DEFAULT_PLAN, Plan, Step
from rollouts.services import MANUAL_ACTIONS


class RolloutFilterForm(forms.Form):
    """The list's state filter, read from the query string."""

    state = forms.ChoiceField(
        required=False,
        choices=[("", "all"), ("live", "live"), ("terminal", "ended")],
    )


class RolloutActionForm(forms.Form):
    action = forms.ChoiceField(choices=[(name, name) for name in MANUAL_ACTIONS])
    reason = forms.CharField(
        max_length=2000,
        error_messages={"required": "Say why: the reason is kept in the rollout's event log."},
    )

    def clean_reason(self) -> str:
        reason: str = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError("Say why: the reason is kept in the rollout's event log.")
        return reason


class RouteChoiceField(forms.ModelChoiceField[Route]):
    def label_from_instance(self, obj: Route) -> str:
        return f"{obj.name} (baseline {obj.baseline.artifact})"


class CandidateChoiceField(forms.ModelChoiceField[Deployment]):
    def label_from_instance(self, obj: Deployment) -> str:
        return f"{obj.artifact} · {obj.fleet.name} · {obj.served_model_name}"


def candidate_deployments() -> QuerySet[Deployment]:
    # Retired and failed deployments serve nothing: a rollout of one could never get ready.
    return (
        Deployment.objects.exclude(state__in=[DeploymentState.RETIRED, DeploymentState.FAILED])
        .select_related("artifact", "fleet")
        .order_by("artifact__family", "-created_at")
    )


class RolloutCreateForm(forms.Form):
    """Route, candidate and plan. The plan's steps are one row of fields each, seeded from the
    default plan; the weights stay editable so a shorter or finer plan needs no other page."""

    route = RouteChoiceField(
        queryset=Route.objects.select_related("baseline__artifact"),
        empty_label="choose a route",
        error_messages={"required": "Pick the route whose traffic the candidate will take."},
    )
    candidate = CandidateChoiceField(
        queryset=candidate_deployments(),
        empty_label="choose a candidate deployment",
        # Choosing one swaps in its gate status (the page's "Check gates" button does it without
        # JS); a GET of the select alone sends only `candidate`.
        widget=forms.Select(
            attrs={
                "hx-get": reverse_lazy("rollouts:rollout-create"),
                "hx-target": "#candidate-gates",
                "hx-swap": "outerHTML",
            }
        ),
        error_messages={"required": "Pick the candidate deployment to roll out."},
    )
    override_reason = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Override reason",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for index, step in enumerate(DEFAULT_PLAN.steps):
            self.fields[f"step_{index}_weight"] = forms.FloatField(
                initial=f"{step.weight:g}", min_value=0, max_value=100, required=False
            )
            self.fields[f"step_{index}_bake"] = forms.IntegerField(
                initial=step.min_bake_s, min_value=0, required=False
            )
            self.fields[f"step_{index}_samples"] = forms.IntegerField(
                initial=step.min_samples, min_value=1, required=False
            )

    def step_rows(self) -> list[tuple[forms.BoundField, forms.BoundField, forms.BoundField]]:
        return [
            (self[f"step_{i}_weight"], self[f"step_{i}_bake"], self[f"step_{i}_samples"])
            for i in range(len(DEFAULT_PLAN.steps))
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        steps: list[Step] = []
        try:
            for index, default in enumerate(DEFAULT_PLAN.steps):
                name = f"step_{index}_weight"
                # A blank weight drops the step; a post without the plan's fields gets the default.
                weight = data.get(name) if name in self.data else default.weight
                if weight is None:
                    continue
                bake = data.get(f"step_{index}_bake")
                samples = data.get(f"step_{index}_samples")
                steps.append(
                    Step(
                        weight=weight,
                        min_bake_s=default.min_bake_s if bake is None else bake,
                        min_samples=default.min_samples if samples is None else samples,
                    )
                )
            data["plan"] = Plan(steps=tuple(steps))
        except PydanticError as exc:
            messages = "; ".join(str(error["msg"]) for error in exc.errors())
            self.add_error(None, f"The plan is not valid: {messages}.")
        return data
