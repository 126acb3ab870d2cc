from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tenants.choices import FailMode, Role, Scope, SoftLimitAction, Tier
from tenants.models import ApiKey, ApiToken, Budget, RecentRejection, Tenant
from tenants.selectors import budget_of
from tenants.services.budgets import BUDGET_FIELDS


class MeOutputSerializer(serializers.Serializer[dict[str, Any]]):
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices)
    tenant = serializers.CharField(allow_null=True, help_text="Slug of a tenant admin's tenant.")
    authenticated_by = serializers.ChoiceField(choices=["session", "token"])
    scopes = serializers.ListField(
        child=serializers.CharField(), allow_null=True, help_text="Null for session logins."
    )


class BudgetOutput(serializers.ModelSerializer[Budget]):
    class Meta:
        model = Budget
        fields = [*BUDGET_FIELDS, "updated_at"]


class TenantOutput(serializers.ModelSerializer[Tenant]):
    class Meta:
        model = Tenant
        fields = ["slug", "name", "tier", "fail_mode", "over_soft_limit", "created_at"]


class TenantCreateInput(serializers.Serializer[dict[str, Any]]):
    slug = serializers.SlugField(max_length=63)
    name = serializers.CharField(max_length=200)
    tier = serializers.ChoiceField(choices=Tier.choices, default=Tier.STANDARD)
    fail_mode = serializers.ChoiceField(choices=FailMode.choices, default=FailMode.CLOSED)
    budget = serializers.DictField(
        required=False,
        help_text="The first budget: any of the budget's fields (see PATCH …/budget); "
        "the others stay unlimited",
    )


class TenantDetailOutput(TenantOutput):
    budget = serializers.SerializerMethodField()

    class Meta(TenantOutput.Meta):
        fields = [*TenantOutput.Meta.fields, "budget"]

    @extend_schema_field(BudgetOutput)
    def get_budget(self, tenant: Tenant) -> dict[str, Any]:
        return dict(BudgetOutput(budget_of(tenant)).data)


class BudgetInput(serializers.Serializer[dict[str, Any]]):
    """Only the fields given change; null removes a limit."""

    requests_per_minute = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    input_tokens_per_minute = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    output_tokens_per_minute = serializers.IntegerField(
        min_value=0, allow_null=True, required=False
    )
    tokens_per_day = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    tokens_per_month = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    max_concurrent_requests = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    max_context_tokens = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    max_output_tokens = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    over_max_output = serializers.ChoiceField(choices=Budget.OverMaxOutput.choices, required=False)
    default_output_allowance = serializers.IntegerField(min_value=1, required=False)
    soft_limit_percent = serializers.IntegerField(
        min_value=1, max_value=100, allow_null=True, required=False
    )
    soft_limit_action = serializers.ChoiceField(choices=SoftLimitAction.choices, required=False)
    soft_limit_route = serializers.CharField(
        max_length=100, allow_null=True, allow_blank=True, required=False
    )
    reason = serializers.CharField(max_length=2000, required=False, default="")


class ApiKeyOutput(serializers.ModelSerializer[ApiKey]):
    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "allowed_routes",
            "can_force_arm",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
        ]


class ApiKeyCreatedOutput(ApiKeyOutput):
    secret = serializers.CharField(help_text="The key itself: shown in this answer only.")

    class Meta(ApiKeyOutput.Meta):
        fields = [*ApiKeyOutput.Meta.fields, "secret"]


class ApiKeyCreateInput(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField(max_length=100)
    allowed_routes = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, default=list
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    can_force_arm = serializers.BooleanField(
        required=False, default=False, help_text="Release managers only."
    )


class UsageBucketOutput(serializers.Serializer[dict[str, Any]]):
    start = serializers.DateTimeField()
    requests = serializers.IntegerField()
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    # ("errors" would shadow the serializer's own attribute.)
    failed = serializers.IntegerField(source="errors", help_text="requests that errored")
    rejected = serializers.IntegerField()
    rejections = serializers.DictField(child=serializers.IntegerField())
    cost = serializers.FloatField()


class RouteUsageOutput(serializers.Serializer[dict[str, Any]]):
    route = serializers.CharField()
    arm = serializers.CharField()
    deployment = serializers.CharField()
    model = serializers.CharField()
    requests = serializers.IntegerField()
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    # ("errors" would shadow the serializer's own attribute.)
    failed = serializers.IntegerField(source="errors", help_text="requests that errored")
    rejected = serializers.IntegerField()
    cost = serializers.FloatField()


class RejectionOutput(serializers.ModelSerializer[RecentRejection]):
    class Meta:
        model = RecentRejection
        fields = ["at", "route", "arm", "reason", "status", "request_id"]


class UsageOutput(serializers.Serializer[dict[str, Any]]):
    tenant = serializers.CharField()
    range = serializers.ChoiceField(choices=["hour", "day", "month"])
    granularity = serializers.CharField(help_text="minute, hour or day buckets")
    buckets = UsageBucketOutput(many=True)
    by_route = RouteUsageOutput(many=True)
    recent_rejections = RejectionOutput(many=True)


class ApiTokenOutput(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
        ]


class ApiTokenCreatedOutput(ApiTokenOutput):
    secret = serializers.CharField(help_text="The token itself: shown in this answer only.")

    class Meta(ApiTokenOutput.Meta):
        fields = [*ApiTokenOutput.Meta.fields, "secret"]


class ApiTokenCreateInput(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=Scope.choices),
        allow_empty=False,
        help_text="At most the scopes the caller's role allows (see GET /api/v1/me).",
    )
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
