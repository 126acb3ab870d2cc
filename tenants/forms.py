from __future__ import annotations

from typing import Any

from django import forms
from django.utils import timezone

from tenants.choices import ROLE_SCOPES, FailMode, Scope, SoftLimitAction, Tier
from tenants.models import Budget
from tenants.services.budgets import BUDGET_FIELDS


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        error_messages={"required": "Give the key a name, so people can tell keys apart."},
    )
    expires_at = forms.DateTimeField(
        required=False,
        help_text="UTC, e.g. 2027-01-31 00:00; leave empty for a key that does not expire.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    allowed_routes = forms.MultipleChoiceField(
        required=False,
        help_text="Leave all unticked for every route open to the tenant.",
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args: Any, routes: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        routes_field = self.fields["allowed_routes"]
        assert isinstance(routes_field, forms.MultipleChoiceField)  # noqa: S101 -- declared above
        routes_field.choices = [(name, name) for name in routes]

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Give the key a name, so people can tell keys apart.")
        return name

    def clean_expires_at(self) -> Any:
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and expires_at <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future.")
        return expires_at


class TenantCreateForm(forms.Form):
    """A new tenant and the limits of its first budget (the budget page edits the rest)."""

    slug = forms.SlugField(max_length=63, help_text="In URLs and the API, e.g. acme-corp.")
    name = forms.CharField(max_length=200)
    tier = forms.ChoiceField(choices=Tier.choices, initial=Tier.STANDARD)
    fail_mode = forms.ChoiceField(choices=FailMode.choices, initial=FailMode.CLOSED)
    requests_per_minute = forms.IntegerField(min_value=0, required=False)
    input_tokens_per_minute = forms.IntegerField(min_value=0, required=False)
    output_tokens_per_minute = forms.IntegerField(min_value=0, required=False)
    tokens_per_day = forms.IntegerField(min_value=0, required=False)
    tokens_per_month = forms.IntegerField(min_value=0, required=False)
    max_concurrent_requests = forms.IntegerField(min_value=0, required=False)

    LIMITS = (
        "requests_per_minute",
        "input_tokens_per_minute",
        "output_tokens_per_minute",
        "tokens_per_day",
        "tokens_per_month",
        "max_concurrent_requests",
    )

    def limits(self) -> dict[str, int | str | None]:
        return {name: self.cleaned_data[name] for name in self.LIMITS}


class ApiTokenCreateForm(forms.Form):
    """A person's new API token: scopes offered are those their role allows."""

    name = forms.CharField(
        max_length=100,
        error_messages={"required": "Give the token a name, e.g. the pipeline that will use it."},
    )
    scopes = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Tick at least one scope."},
    )
    expires_at = forms.DateTimeField(
        required=False,
        help_text="UTC; leave empty for a token that does not expire.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    def __init__(self, *args: Any, role: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        scopes = self.fields["scopes"]
        assert isinstance(scopes, forms.MultipleChoiceField)  # noqa: S101 -- declared above
        allowed = ROLE_SCOPES.get(role, frozenset())
        scopes.choices = [(value, label) for value, label in Scope.choices if value in allowed]

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError(
                "Give the token a name, e.g. the pipeline that will use it."
            )
        return name

    def clean_expires_at(self) -> Any:
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and expires_at <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future.")
        return expires_at


class BudgetForm(forms.ModelForm[Budget]):
    """Every limit of a budget; an empty number field means no limit."""

    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)
    # The version of the budget the confirmation page showed (services.budget_version).
    reviewed_version = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)
    reason = forms.CharField(
        max_length=2000, required=False, help_text="Kept in the audit log with the change."
    )

    class Meta:
        model = Budget
        fields = list(BUDGET_FIELDS)
        widgets = {"soft_limit_route": forms.Select}

    def __init__(self, *args: Any, routes: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        route_field = self.fields["soft_limit_route"]
        route_field.widget.choices = [("", "— none —"), *[(r, r) for r in routes]]
        self.routes = routes

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        route = data.get("soft_limit_route") or ""
        if route and route not in self.routes:
            self.add_error("soft_limit_route", f"No route {route!r} is open to this tenant.")
        if data.get("soft_limit_action") == SoftLimitAction.ROUTE and not route:
            self.add_error("soft_limit_route", "Name the cheaper route to send requests to.")
        return data

    def limits(self) -> dict[str, Any]:
        return {name: self.cleaned_data.get(name) for name in BUDGET_FIELDS}
