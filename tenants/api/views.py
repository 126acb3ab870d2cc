from typing import cast

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants.api.serializers import MeOutputSerializer
from tenants.models import ApiToken, User


class MeView(APIView):
    """Who the caller is: lets CI check a token and its scopes before doing real work."""

    @extend_schema(responses=MeOutputSerializer, operation_id="me")
    def get(self, request: Request) -> Response:
        user = cast(User, request.user)  # IsAuthenticated has run
        token = request.auth if isinstance(request.auth, ApiToken) else None
        data = {
            "username": user.get_username(),
            "role": user.role,
            "tenant": user.tenant.slug if user.tenant else None,
            "authenticated_by": "token" if token else "session",
            "scopes": token.scopes if token else None,
        }
        return Response(MeOutputSerializer(data).data)
