"""Route rules over the API: every role reads the rules of the routes it may see; release
managers (and their tokens with rollouts:write) add, replace and remove them."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import DomainError, NotFound
from rollouts import selectors
from rollouts.api import serializers as s
from rollouts.api.views import PERMISSIONS, READ, WRITE
from rollouts.models import Deployment, RouteRule
from rollouts.services import rules as services
from tenants.models import Tenant, User

SCOPES = {"GET": READ, "HEAD": READ, "POST": WRITE, "PUT": WRITE, "DELETE": WRITE}


def _rule_fields(values: dict[str, Any]) -> dict[str, Any]:
    """The service's arguments from validated input; unknown names are a 400 naming them."""
    target = Deployment.objects.filter(pk=values["target_deployment"]).first()
    if target is None:
        raise DomainError(f"no deployment {values['target_deployment']}")
    slugs = set(values["tenants"])
    tenants = list(Tenant.objects.filter(slug__in=slugs))
    unknown = sorted(slugs - {t.slug for t in tenants})
    if unknown:
        raise DomainError(f"no tenant named {', '.join(unknown)}")
    return {
        "target": target,
        "tenants": tenants,
        "tiers": values["tiers"],
        "min_prompt_tokens": values["min_prompt_tokens"],
        "max_prompt_tokens": values["max_prompt_tokens"],
        "order": values["order"],
    }


def _rule(request: Request, route_name: str, rule_name: str) -> RouteRule:
    route = selectors.route_for(request.user, route_name)
    rule = selectors.visible_rules(request.user, route).filter(name=rule_name).first()
    if rule is None:
        raise NotFound(f"route {route_name} has no rule named {rule_name!r}")
    return rule


def _out(request: Request, rule: RouteRule) -> dict[str, Any]:
    fresh = _rule(request, rule.route.name, rule.name)
    return dict(s.RouteRuleOutput(fresh, context={"user": request.user}).data)


class RouteRulesView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=s.RouteRuleOutput(many=True), operation_id="route_rules_list")
    def get(self, request: Request, route_name: str) -> Response:
        route = selectors.route_for(request.user, route_name)
        rules = selectors.visible_rules(request.user, route)
        return Response(s.RouteRuleOutput(rules, many=True, context={"user": request.user}).data)

    @extend_schema(
        request=s.RouteRuleCreateInput,
        responses={201: s.RouteRuleOutput},
        operation_id="route_rules_create",
        description="Adds a rule to the route (after its last one unless `order` is given). "
        "Requests it matches go to `target_deployment`, outside the route's canary split.",
    )
    def post(self, request: Request, route_name: str) -> Response:
        data = s.RouteRuleCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        route = selectors.route_for(request.user, route_name)
        rule = services.route_rule_create(
            actor=cast(User, request.user),
            route=route,
            name=data.validated_data["name"],
            **_rule_fields(data.validated_data),
        )
        return Response(_out(request, rule), status=status.HTTP_201_CREATED)


class RouteRuleView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=s.RouteRuleOutput, operation_id="route_rules_get")
    def get(self, request: Request, route_name: str, rule_name: str) -> Response:
        rule = _rule(request, route_name, rule_name)
        return Response(s.RouteRuleOutput(rule, context={"user": request.user}).data)

    @extend_schema(
        request=s.RouteRuleInput,
        responses=s.RouteRuleOutput,
        operation_id="route_rules_replace",
        description="Replaces what the rule matches and where it sends it; its name stays.",
    )
    def put(self, request: Request, route_name: str, rule_name: str) -> Response:
        data = s.RouteRuleInput(data=request.data)
        data.is_valid(raise_exception=True)
        rule = _rule(request, route_name, rule_name)
        rule = services.route_rule_update(
            actor=cast(User, request.user), rule_id=rule.pk, **_rule_fields(data.validated_data)
        )
        return Response(_out(request, rule))

    @extend_schema(responses={204: None}, operation_id="route_rules_delete")
    def delete(self, request: Request, route_name: str, rule_name: str) -> Response:
        rule = _rule(request, route_name, rule_name)
        services.route_rule_delete(actor=cast(User, request.user), rule_id=rule.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
