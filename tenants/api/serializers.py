from typing import Any

from rest_framework import serializers

from tenants.choices import Role


class MeOutputSerializer(serializers.Serializer[dict[str, Any]]):
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices)
    tenant = serializers.CharField(allow_null=True, help_text="Slug of a tenant admin's tenant.")
    authenticated_by = serializers.ChoiceField(choices=["session", "token"])
    scopes = serializers.ListField(
        child=serializers.CharField(), allow_null=True, help_text="Null for session logins."
    )
