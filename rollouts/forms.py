from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.db.models import QuerySet
from django.urls import reverse_lazy
from pydantic import ValidationError as PydanticError

from registry.models import ModelArtifact
from rollouts.choices import DeploymentKind, DeploymentState, Provider, Stickiness
from rollouts.models import RULE_NAME_MAX_LENGTH, Deployment, Fleet, PlanTemplate, Route
from rollouts.plans import DEFAULT_PLAN, Plan, SloGates, Step
from rollouts.services.rollouts import MANUAL_ACTIONS
from tenants.choices import Tier
from tenants.models import Tenant


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


class PlanTemplateChoiceField(forms.ModelChoiceField[PlanTemplate]):
    def label_from_instance(self, obj: PlanTemplate) -> str:
        weights = " → ".join(f"{step.weight:g}%" for step in obj.parsed_plan.steps)
        return f"{obj.name} ({weights})"


# Rows a posted plan may have: enough for any sensible plan, bounded so a post cannot make many.
MAX_STEPS = 12


class PlanStepsForm(forms.Form):
    """A plan's steps as one row of fields each (weight, bake time, samples), seeded from a plan.
    A blank weight drops its step; `spare_rows` empty rows let a step be added."""

    spare_rows = 0

    def __init__(self, *args: Any, seed_plan: Plan = DEFAULT_PLAN, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seed_plan = seed_plan
        posted = [i for i in range(MAX_STEPS) if f"step_{i}_weight" in self.data]
        seeded = min(MAX_STEPS, len(seed_plan.steps) + (0 if self.is_bound else self.spare_rows))
        self.row_count = max(seeded, max(posted, default=-1) + 1)
        for index in range(self.row_count):
            step = seed_plan.steps[index] if index < len(seed_plan.steps) else None
            self.fields[f"step_{index}_weight"] = forms.FloatField(
                initial=f"{step.weight:g}" if step else None,
                min_value=0,
                max_value=100,
                required=False,
            )
            self.fields[f"step_{index}_bake"] = forms.IntegerField(
                initial=step.min_bake_s if step else None, min_value=0, required=False
            )
            self.fields[f"step_{index}_samples"] = forms.IntegerField(
                initial=step.min_samples if step else None, min_value=1, required=False
            )

    def step_rows(self) -> list[tuple[forms.BoundField, forms.BoundField, forms.BoundField]]:
        return [
            (self[f"step_{i}_weight"], self[f"step_{i}_bake"], self[f"step_{i}_samples"])
            for i in range(self.row_count)
        ]

    def clean_plan(self, data: dict[str, Any], progress_deadline_s: int) -> Plan | None:
        """The plan the rows describe, or None with the form's error saying what is wrong."""
        steps: list[Step] = []
        seed = self.seed_plan
        # A post without any of the plan's fields (a script, a test) gets the seed's steps; one
        # with some of them gets exactly the steps it sent.
        posted = any(f"step_{index}_weight" in self.data for index in range(self.row_count))
        try:
            for index in range(self.row_count):
                default = seed.steps[index] if index < len(seed.steps) else None
                weight = (
                    data.get(f"step_{index}_weight") if posted else getattr(default, "weight", None)
                )
                if weight is None:
                    continue
                bake = data.get(f"step_{index}_bake")
                samples = data.get(f"step_{index}_samples")
                fallback = default or Step(weight=weight)
                steps.append(
                    Step(
                        weight=weight,
                        min_bake_s=fallback.min_bake_s if bake is None else bake,
                        min_samples=fallback.min_samples if samples is None else samples,
                    )
                )
            return Plan(steps=tuple(steps), progress_deadline_s=progress_deadline_s)
        except PydanticError as exc:
            messages = "; ".join(str(error["msg"]) for error in exc.errors())
            self.add_error(None, f"The plan is not valid: {messages}.")
            return None


class RolloutCreateForm(PlanStepsForm):
    """Route, candidate and plan. The plan's steps are seeded from the chosen plan template or the
    default plan, and stay editable so a shorter or finer plan needs no other page. A template
    also brings its SLO gates."""

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
    control = CandidateChoiceField(
        queryset=candidate_deployments().filter(state=DeploymentState.READY),
        required=False,
        empty_label="no control arm",
        help_text="A second deployment of the baseline, given the canary's weight: the judge "
        "then compares the candidate with the baseline under the same load.",
    )
    override_reason = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Override reason",
    )
    plan_template = PlanTemplateChoiceField(
        queryset=PlanTemplate.objects.order_by("name"),
        to_field_name="name",
        required=False,
        empty_label="default plan",
        # Choosing one swaps in its steps and gates; a GET of the select sends only its value.
        widget=forms.Select(
            attrs={
                "hx-get": reverse_lazy("rollouts:rollout-create"),
                "hx-target": "#plan-steps",
                "hx-swap": "outerHTML",
            }
        ),
        error_messages={"invalid_choice": "No plan template has that name any more."},
    )

    def __init__(self, *args: Any, seed: PlanTemplate | None = None, **kwargs: Any) -> None:
        """`seed`: the template whose steps fill the rows (else the default plan)."""
        plan = seed.parsed_plan if seed is not None else DEFAULT_PLAN
        super().__init__(*args, seed_plan=plan, **kwargs)
        self.seed_gates = seed.parsed_gates if seed is not None else None

    def gates_summary(self) -> str:
        gates = self.seed_gates
        if gates is None:
            return "Default SLO gates."
        return f"The template's SLO gates: {describe_gates(gates)}."

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        plan = self.clean_plan(data, self.seed_plan.progress_deadline_s)
        if plan is not None:
            data["plan"] = plan
        data["gates"] = self.seed_gates
        return data


def describe_gates(gates: SloGates) -> str:
    def limit(value: float | None) -> str:
        return f"≤ {value:g} ms" if value is not None else "unlimited"

    return (
        f"TTFT p95 {limit(gates.ttft_p95_ms)}, TPOT p95 {limit(gates.tpot_p95_ms)}, errors ≤ "
        f"{gates.max_error_rate:.1%}, timeouts ≤ {gates.max_timeout_rate:.1%}"
    )


class PlanTemplateForm(PlanStepsForm):
    """A saved plan: its steps (two spare rows to add some), deadline and SLO gates. A blank
    latency limit means none."""

    spare_rows = 2
    description = forms.CharField(max_length=500, required=False)
    progress_deadline_s = forms.IntegerField(min_value=1, label="Progress deadline (s)")
    ttft_p95_ms = forms.FloatField(min_value=0.001, required=False, label="TTFT p95 ≤ (ms)")
    tpot_p95_ms = forms.FloatField(min_value=0.001, required=False, label="TPOT p95 ≤ (ms)")
    max_error_rate = forms.FloatField(min_value=0, max_value=1, label="Error rate ≤ (fraction)")
    max_timeout_rate = forms.FloatField(min_value=0, max_value=1, label="Timeout rate ≤ (fraction)")
    min_guardrail_samples = forms.IntegerField(min_value=1, label="Samples before a rate counts")

    def __init__(self, *args: Any, template: PlanTemplate | None = None, **kwargs: Any) -> None:
        plan = template.parsed_plan if template is not None else DEFAULT_PLAN
        gates = template.parsed_gates if template is not None else SloGates()
        # Numbers as people write them: 200, not 200.0.
        shown = {k: f"{v:g}" if isinstance(v, float) else v for k, v in gates.model_dump().items()}
        kwargs.setdefault(
            "initial",
            {
                "description": template.description if template else "",
                "progress_deadline_s": plan.progress_deadline_s,
                **shown,
            },
        )
        super().__init__(*args, seed_plan=plan, **kwargs)

    def settings_fields(self) -> list[forms.BoundField]:
        """The deadline and the gates, drawn below the steps."""
        return [self["progress_deadline_s"], *(self[name] for name in SloGates.model_fields)]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        deadline = data.get("progress_deadline_s")
        plan = self.clean_plan(data, deadline) if deadline else None
        gate_fields = {name: data.get(name) for name in SloGates.model_fields}
        if plan is None or any(name in self.errors for name in gate_fields):
            return data
        try:
            data["gates"] = SloGates.model_validate(gate_fields)
        except PydanticError as exc:
            self.add_error(None, "; ".join(str(error["msg"]) for error in exc.errors()))
            return data
        data["plan"] = plan
        return data


class PlanTemplateCreateForm(PlanTemplateForm):
    name = forms.SlugField(
        max_length=100,
        error_messages={"invalid": "Use letters, digits, - and _ only (it is used in URLs)."},
    )


class RuleTargetChoiceField(forms.ModelChoiceField[Deployment]):
    def label_from_instance(self, obj: Deployment) -> str:
        context = f", context {obj.max_model_len:,}" if obj.max_model_len else ""
        return f"{obj.artifact} · {obj.fleet.name} · {obj.served_model_name}{context}"


class RouteRuleEditForm(forms.Form):
    """What a rule matches and where it sends it. The service decides what is valid (a ready
    target, a sane range, a condition at all); the form only parses."""

    target = RuleTargetChoiceField(
        queryset=Deployment.objects.filter(state=DeploymentState.READY)
        .select_related("artifact", "fleet")
        .order_by("artifact__family", "-created_at"),
        empty_label="choose a ready deployment",
        error_messages={"required": "Pick the deployment the matching requests go to."},
    )
    tenants = forms.ModelMultipleChoiceField(
        queryset=Tenant.objects.order_by("slug"),
        to_field_name="slug",
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    tiers = forms.MultipleChoiceField(
        choices=Tier.choices, required=False, widget=forms.CheckboxSelectMultiple
    )
    min_prompt_tokens = forms.IntegerField(min_value=0, required=False)
    max_prompt_tokens = forms.IntegerField(min_value=0, required=False)
    order = forms.IntegerField(
        min_value=0, max_value=32767, required=False, help_text="Blank: after the last rule."
    )


class RouteRuleForm(RouteRuleEditForm):
    """A new rule: a name as well (it cannot change later)."""

    name = forms.CharField(
        max_length=RULE_NAME_MAX_LENGTH,
        help_text="Its requests are recorded under the arm rule:<name>.",
    )
    field_order = ["name"]


class RouteRuleDeleteForm(forms.Form):
    reason = forms.CharField(
        max_length=2000,
        error_messages={"required": "Say why: the reason is kept in the audit log."},
    )


class FleetForm(forms.Form):
    name = forms.SlugField(max_length=100)
    provider = forms.ChoiceField(choices=Provider.choices, initial=Provider.STATIC)
    gpu_type = forms.CharField(max_length=100, required=False)
    gpus_per_replica = forms.IntegerField(min_value=1, max_value=64, initial=1)
    dollars_per_gpu_hour = forms.DecimalField(
        min_value=Decimal("0"), max_digits=8, decimal_places=4, initial=Decimal("0")
    )


class ReplicaForm(forms.Form):
    name = forms.SlugField(max_length=100)
    base_url = forms.URLField(max_length=500, help_text="e.g. http://10.0.0.7:8000")


class DeploymentForm(forms.Form):
    artifact = forms.ModelChoiceField(queryset=ModelArtifact.objects.order_by("family", "version"))
    fleet = forms.ModelChoiceField(queryset=Fleet.objects.order_by("name"), to_field_name="name")
    served_model_name = forms.CharField(max_length=200)
    kind = forms.ChoiceField(choices=DeploymentKind.choices, initial=DeploymentKind.FULL)
    max_model_len = forms.IntegerField(min_value=1, required=False)


class RouteForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="The model name clients send.")
    baseline = forms.ModelChoiceField(
        queryset=Deployment.objects.filter(state=DeploymentState.READY).select_related(
            "artifact", "fleet"
        )
    )
    stickiness = forms.ChoiceField(choices=Stickiness.choices, initial=Stickiness.USER)
    tenants = forms.ModelMultipleChoiceField(
        queryset=Tenant.objects.order_by("slug"),
        to_field_name="slug",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every tenant may use it.",
    )
