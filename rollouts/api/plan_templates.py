"""Saved plan templates over the API: every role reads them; release managers (and their tokens
with rollouts:write) save, replace and delete them. CI starts a rollout from one by name
(`plan_template` on POST /rollouts)."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import extend_schema
from pydantic import ValidationError as PydanticError
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import DomainError
from rollouts import selectors
from rollouts.api import serializers as s
from rollouts.api.views import PERMISSIONS, READ, WRITE
from rollouts.plans import Plan, SloGates
from rollouts.services import templates as services
from tenants.models import User

SCOPES = {"GET": READ, "HEAD": READ, "POST": WRITE, "PUT": WRITE, "DELETE": WRITE}


def parsed(values: dict[str, Any]) -> tuple[Plan, SloGates]:
    try:
        plan = Plan.model_validate(
            {"steps": values["steps"], "progress_deadline_s": values["progress_deadline_s"]}
        )
        gates = SloGates.model_validate(values.get("gates") or {})
    except PydanticError as exc:
        raise DomainError("; ".join(e["msg"] for e in exc.errors())) from exc
    return plan, gates


class PlanTemplatesView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=s.PlanTemplateOutput(many=True), operation_id="plan_templates_list")
    def get(self, request: Request) -> Response:
        return Response(s.PlanTemplateOutput(selectors.plan_templates(), many=True).data)

    @extend_schema(
        request=s.PlanTemplateCreateInput,
        responses={201: s.PlanTemplateOutput},
        operation_id="plan_templates_create",
    )
    def post(self, request: Request) -> Response:
        data = s.PlanTemplateCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        plan, gates = parsed(data.validated_data)
        template = services.plan_template_create(
            actor=cast(User, request.user),
            name=data.validated_data["name"],
            description=data.validated_data["description"],
            plan=plan,
            gates=gates,
        )
        return Response(s.PlanTemplateOutput(template).data, status=status.HTTP_201_CREATED)


class PlanTemplateView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=s.PlanTemplateOutput, operation_id="plan_templates_get")
    def get(self, request: Request, name: str) -> Response:
        return Response(s.PlanTemplateOutput(selectors.plan_template_named(name)).data)

    @extend_schema(
        request=s.PlanTemplateInput,
        responses=s.PlanTemplateOutput,
        operation_id="plan_templates_replace",
        description="Replaces the template's plan and gates. Rollouts already created keep the "
        "plan they copied.",
    )
    def put(self, request: Request, name: str) -> Response:
        data = s.PlanTemplateInput(data=request.data)
        data.is_valid(raise_exception=True)
        plan, gates = parsed(data.validated_data)
        template = services.plan_template_update(
            actor=cast(User, request.user),
            name=name,
            description=data.validated_data["description"],
            plan=plan,
            gates=gates,
        )
        return Response(s.PlanTemplateOutput(template).data)

    @extend_schema(responses={204: None}, operation_id="plan_templates_delete")
    def delete(self, request: Request, name: str) -> Response:
        services.plan_template_delete(actor=cast(User, request.user), name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)
