"""The evaluation REST API: feedback from applications, rollout reports and verdicts."""

from __future__ import annotations

from typing import cast

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.errors import NotFound
from evaluation import services
from evaluation.api import serializers as s
from evaluation.api.authentication import GatewayKeyAuthentication
from tenants.authentication import ApiTokenAuthentication
from tenants.choices import Scope
from tenants.models import ApiKey, User
from tenants.permissions import TokenHasScopes


class FeedbackView(APIView):
    authentication_classes = [GatewayKeyAuthentication, ApiTokenAuthentication]
    permission_classes = [IsAuthenticated, TokenHasScopes]
    # For release managers' API tokens (QA); gateway keys carry no scopes and are checked by
    # tenant and route instead.
    required_scopes = (Scope.ROLLOUTS_WRITE,)

    @extend_schema(
        request=s.FeedbackInput,
        responses={
            201: s.FeedbackOutput,
            400: OpenApiResponse(
                description="neither or both of thumbs and outcome, or bad values"
            ),
            404: OpenApiResponse(
                description="the response id is unknown, or not seen yet: retry after the "
                "Retry-After header's seconds"
            ),
        },
        operation_id="feedback_create",
        description="Reports a person's thumbs (up/down) or an application's outcome "
        "(success/failure) for one response, by the `id` the gateway returned. Send it with the "
        "tenant's gateway key (`Bearer tk_…`). A second report on the same response replaces "
        "the first. Counted per arm in the rollout's A/B report.",
    )
    def post(self, request: Request) -> Response:
        data = s.FeedbackInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        key = request.auth if isinstance(request.auth, ApiKey) else None
        try:
            feedback = services.feedback_record(
                rid=values["id"],
                value=values["value"],
                note=values["note"],
                key=key,
                actor=None if key is not None else cast(User, request.user),
            )
        except NotFound as exc:
            return Response(
                {"detail": str(exc)},
                status=status.HTTP_404_NOT_FOUND,
                headers={"Retry-After": str(services.FEEDBACK_RETRY_AFTER_S)},
            )
        return Response(s.FeedbackOutput(feedback).data, status=status.HTTP_201_CREATED)
