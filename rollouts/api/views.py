"""The rollouts REST API: what CI calls to start, watch and steer a rollout."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import ValidationError as PydanticError
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import DomainError, NotFound
from rollouts import selectors
from rollouts.api import serializers as s
from rollouts.models import Deployment, Rollout, Route
from rollouts.plans import DEFAULT_PLAN, Plan, SloGates
from rollouts.services import rollouts as services
from tenants.choices import Scope
from tenants.models import User
from tenants.permissions import ReleaseManagerWrites, TokenHasScopes

READ, WRITE = (Scope.ROLLOUTS_READ,), (Scope.ROLLOUTS_WRITE,)
PERMISSIONS = [IsAuthenticated, TokenHasScopes, ReleaseManagerWrites]
SCOPES = {"GET": READ, "HEAD": READ, "POST": WRITE}


def _rollout(request: Request, rollout_id: int) -> Rollout:
    """The rollout, if the caller may see its route; otherwise it does not exist for them."""
    rollout = (
        selectors.rollout_list(user=request.user)
        .prefetch_related("events")
        .filter(pk=rollout_id)
        .first()
    )
    if rollout is None:
        raise NotFound(f"rollout {rollout_id} does not exist")
    return rollout


class RolloutsView(ListAPIView[Rollout]):
    serializer_class = s.RolloutOutput
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    def get_queryset(self) -> Any:
        params = self.request.query_params
        return selectors.rollout_list(
            user=self.request.user, state=params.get("state", ""), route=params.get("route", "")
        ).prefetch_related("events")

    @extend_schema(
        operation_id="rollouts_list",
        parameters=[
            OpenApiParameter("state", str, description="a state, or 'live'"),
            OpenApiParameter("route", str),
        ],
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=s.RolloutCreateInput,
        responses={201: s.RolloutOutput},
        operation_id="rollouts_create",
        description="Creates a rollout of a candidate deployment on a route and (by default) "
        "starts it. A candidate failing its promotion gates needs `override_reason`.",
    )
    def post(self, request: Request) -> Response:
        data = s.RolloutCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        route = Route.objects.filter(name=values["route"]).first()
        if route is None:
            raise DomainError(f"no route named {values['route']!r}")
        candidate = Deployment.objects.filter(pk=values["candidate_deployment"]).first()
        if candidate is None:
            raise DomainError(f"no deployment {values['candidate_deployment']}")
        control = None
        if "control_deployment" in values:
            control = Deployment.objects.filter(pk=values["control_deployment"]).first()
            if control is None:
                raise DomainError(f"no deployment {values['control_deployment']}")
        plan, gates = DEFAULT_PLAN, SloGates()
        if "plan_template" in values:
            # The template's plan and gates; steps or gates sent alongside replace its own.
            try:
                template = selectors.plan_template_named(values["plan_template"])
            except NotFound as exc:
                raise DomainError(str(exc)) from exc  # a field of this request: a 400
            plan, gates = template.parsed_plan, template.parsed_gates
        try:
            if "steps" in values:
                plan = Plan.model_validate(
                    {"steps": values["steps"], "progress_deadline_s": plan.progress_deadline_s}
                )
            if "gates" in values:
                gates = SloGates.model_validate(values["gates"])
        except PydanticError as exc:
            raise DomainError("; ".join(e["msg"] for e in exc.errors())) from exc
        actor = cast(User, request.user)
        rollout = services.rollout_create(
            actor=actor,
            route=route,
            candidate=candidate,
            plan=plan,
            gates=gates,
            override_reason=values["override_reason"],
            control=control,
        )
        if values["start"]:
            services.rollout_start(actor=actor, rollout_id=rollout.pk)
        return Response(
            s.RolloutOutput(_rollout(request, rollout.pk)).data, status=status.HTTP_201_CREATED
        )


class RolloutView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=s.RolloutOutput, operation_id="rollouts_get")
    def get(self, request: Request, rollout_id: int) -> Response:
        return Response(s.RolloutOutput(_rollout(request, rollout_id)).data)


class RolloutActionView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(request=s.ActionInput, responses=s.RolloutOutput, operation_id="rollouts_action")
    def post(self, request: Request, rollout_id: int) -> Response:
        data = s.ActionInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.rollout_control(
            actor=cast(User, request.user),
            rollout_id=rollout_id,
            action=data.validated_data["action"],
            reason=data.validated_data["reason"],
        )
        return Response(s.RolloutOutput(_rollout(request, rollout_id)).data)
