"""The evaluation REST API: feedback from applications, rollout reports and verdicts."""

from __future__ import annotations

from typing import cast

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import DomainError, NotFound
from evaluation import report, selectors, services
from evaluation.api import serializers as s
from evaluation.api.authentication import (
    FlaggerMetadataTokenAuthentication,
    GatewayKeyAuthentication,
)
from tenants.authentication import ApiTokenAuthentication
from tenants.choices import Scope
from tenants.models import ApiKey, User
from tenants.permissions import TokenHasScopes

READ = (Scope.ROLLOUTS_READ,)
FLAGGER_FAIL = {"rollback": status.HTTP_412_PRECONDITION_FAILED, "hold": status.HTTP_409_CONFLICT}


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


class RolloutReportView(APIView):
    permission_classes = [IsAuthenticated, TokenHasScopes]
    required_scopes = READ

    @extend_schema(
        operation_id="rollouts_report",
        parameters=[OpenApiParameter("step", int, description="1-based; default: the judged step")],
        responses={200: OpenApiResponse(description="the A/B report of one step")},
        description="The A/B report of a rollout step: per-arm figures, the judge's last "
        "verdict per metric (n, estimates, difference, interval, threshold, rule), the "
        "decision, unit costs and fleet signals (null when Prometheus is away).",
    )
    def get(self, request: Request, rollout_id: int) -> Response:
        rollout = selectors.report_rollout(request.user, rollout_id)
        steps = len(rollout.parsed_plan.steps)
        raw = request.query_params.get("step", "")
        step = None
        if raw:
            if not raw.isdigit() or not 1 <= int(raw) <= steps:
                raise DomainError(f"step must be a number from 1 to {steps}, got {raw!r}")
            step = int(raw) - 1
        return Response(report.as_json(report.build(rollout, step=step)))


class RolloutVerdictView(APIView):
    authentication_classes = [
        ApiTokenAuthentication,
        FlaggerMetadataTokenAuthentication,
        SessionAuthentication,
    ]
    permission_classes = [IsAuthenticated, TokenHasScopes]
    # POST only because Flagger's webhooks post; it reads, and needs no more than reading.
    required_scopes_by_method = {"GET": READ, "HEAD": READ, "POST": READ}

    @extend_schema(
        operation_id="rollouts_verdict",
        parameters=[
            OpenApiParameter(
                "format",
                str,
                enum=["argo", "flagger"],
                description="flagger: the status carries the verdict (200 pass; 409 hold, "
                "412 rollback)",
            )
        ],
        responses={
            200: OpenApiResponse(description="the current verdict"),
            409: OpenApiResponse(description="flagger format: the judge holds for a person"),
            412: OpenApiResponse(description="flagger format: roll back"),
        },
        description="The rollout's current verdict for Argo Rollouts web metrics "
        "(`value`: 1 healthy, -1 roll back, 0 undecided) and Flagger webhooks "
        "(`?format=flagger`). See docs/verdict-endpoint.md.",
    )
    def get(self, request: Request, rollout_id: int) -> Response:
        return self._verdict(request, rollout_id)

    @extend_schema(
        operation_id="rollouts_verdict_flagger",
        request=None,
        responses={
            200: OpenApiResponse(description="pass"),
            409: OpenApiResponse(description="the judge holds for a person"),
            412: OpenApiResponse(description="roll back"),
        },
        description="Flagger's webhook call: the same verdict, `format=flagger` implied; the API "
        "token may travel in the payload's `metadata.token` (Flagger cannot set headers).",
    )
    def post(self, request: Request, rollout_id: int) -> Response:
        return self._verdict(request, rollout_id, default_format="flagger")

    def _verdict(self, request: Request, rollout_id: int, default_format: str = "argo") -> Response:
        form = request.query_params.get("format", default_format)
        if form not in ("argo", "flagger"):
            raise DomainError(f"format must be argo or flagger, got {form!r}")
        rollout = selectors.report_rollout(request.user, rollout_id)
        current = selectors.current_verdict(rollout)
        body = {
            "rollout": rollout.pk,
            "state": rollout.state,
            "step": current.step + 1,
            "decision": current.decision,
            "value": current.value,
            "final": current.final,
            "reason": current.reason,
            "looked_at": current.verdict.looked_at.isoformat() if current.verdict else None,
            "verdict_id": current.verdict.pk if current.verdict else None,
        }
        code = FLAGGER_FAIL.get(current.decision, 200) if form == "flagger" else 200
        return Response(body, status=code)
