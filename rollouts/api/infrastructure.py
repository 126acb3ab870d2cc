"""Fleets, replicas, deployments and routes through the API: what a pipeline needs to put a new
version on a fleet and a route before it starts a rollout. Writes are release managers' (and
their tokens' with `rollouts:write`); reads follow the selectors (a tenant admin sees no fleet)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, cast

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import DomainError, NotFound
from registry.models import ModelArtifact
from rollouts import selectors
from rollouts.api.views import PERMISSIONS
from rollouts.choices import DeploymentKind, Provider, Stickiness
from rollouts.models import Deployment, Fleet, Replica, Route
from rollouts.selectors import visible_tenant_slugs
from rollouts.services import deployments, fleets, routes
from tenants.choices import Scope
from tenants.models import User

READ, WRITE = (Scope.ROLLOUTS_READ,), (Scope.ROLLOUTS_WRITE,)
SCOPES = {"GET": READ, "HEAD": READ, "POST": WRITE, "DELETE": WRITE}


# --- serializers ---------------------------------------------------------------------------------


class ReplicaOutput(serializers.ModelSerializer[Replica]):
    class Meta:
        model = Replica
        fields = ["name", "base_url", "state", "healthy", "last_probe_at"]


class FleetOutput(serializers.ModelSerializer[Fleet]):
    replicas = ReplicaOutput(many=True, read_only=True)

    class Meta:
        model = Fleet
        fields = [
            "name",
            "provider",
            "gpu_type",
            "gpus_per_replica",
            "dollars_per_gpu_hour",
            "created_at",
            "replicas",
        ]


class FleetInput(serializers.Serializer[dict[str, Any]]):
    name = serializers.SlugField(max_length=100)
    provider = serializers.ChoiceField(choices=Provider.choices, default=Provider.STATIC)
    gpu_type = serializers.CharField(max_length=100, default="", allow_blank=True)
    gpus_per_replica = serializers.IntegerField(min_value=1, max_value=64, default=1)
    dollars_per_gpu_hour = serializers.DecimalField(
        max_digits=8, decimal_places=4, min_value=Decimal("0"), default=Decimal("0")
    )


class ReplicaInput(serializers.Serializer[dict[str, Any]]):
    name = serializers.SlugField(max_length=100)
    base_url = serializers.URLField(max_length=500, help_text="e.g. http://10.0.0.7:8000")


class DeploymentOutput(serializers.ModelSerializer[Deployment]):
    """A tenant admin reads which version serves a route, not the fleet's hosts: `fleet` and
    `problems` (replica addresses) are blank for whoever may not see fleets."""

    artifact = serializers.CharField(source="artifact.__str__")
    fleet = serializers.CharField(source="fleet.name")

    def to_representation(self, instance: Deployment) -> dict[str, Any]:
        data = dict(super().to_representation(instance))
        if not selectors.sees_infrastructure(self.context.get("user")):  # type: ignore[arg-type]
            data["fleet"], data["problems"] = "", []
        return data

    class Meta:
        model = Deployment
        fields = [
            "id",
            "artifact",
            "fleet",
            "served_model_name",
            "kind",
            "max_model_len",
            "tokenizer_dir",
            "state",
            "problems",
            "created_at",
        ]


class DeploymentInput(serializers.Serializer[dict[str, Any]]):
    artifact = serializers.RegexField(
        r"^[a-z0-9-]+:[^\s:]+$",
        max_length=201,
        help_text="family:version, e.g. support-chat:v2",
        error_messages={"invalid": "give the artifact as family:version, e.g. support-chat:v2"},
    )
    fleet = serializers.SlugField(max_length=100)
    served_model_name = serializers.CharField(max_length=200)
    kind = serializers.ChoiceField(choices=DeploymentKind.choices, default=DeploymentKind.FULL)
    max_model_len = serializers.IntegerField(min_value=1, required=False, allow_null=True)
    tokenizer_dir = serializers.CharField(max_length=500, default="", allow_blank=True)


class RouteOutput(serializers.ModelSerializer[Route]):
    baseline = DeploymentOutput()
    canary = DeploymentOutput(allow_null=True)
    tenants = serializers.SerializerMethodField()

    class Meta:
        model = Route
        fields = ["name", "baseline", "canary", "canary_weight", "stickiness", "tenants"]

    def get_tenants(self, route: Route) -> list[str]:
        return visible_tenant_slugs(self.context.get("user"), route.tenants.all())  # type: ignore[arg-type]


class RouteInput(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField(max_length=100)
    baseline_deployment = serializers.IntegerField(min_value=1)
    stickiness = serializers.ChoiceField(choices=Stickiness.choices, default=Stickiness.USER)
    tenants = serializers.ListField(
        child=serializers.SlugField(max_length=63),
        default=list,
        help_text="Tenants that may use the route; none opens it to every tenant",
    )


class ScrapeTargetGroup(serializers.Serializer[dict[str, Any]]):
    targets = serializers.ListField(child=serializers.CharField(), help_text="host:port")
    labels = serializers.DictField(child=serializers.CharField())


def _valid(serializer: serializers.Serializer[dict[str, Any]]) -> dict[str, Any]:
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _actor(request: Request) -> User:
    return cast(User, request.user)


# --- fleets and replicas -------------------------------------------------------------------------


class FleetsView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=FleetOutput(many=True), operation_id="fleets_list")
    def get(self, request: Request) -> Response:
        return Response(FleetOutput(selectors.visible_fleets(request.user), many=True).data)

    @extend_schema(request=FleetInput, responses={201: FleetOutput}, operation_id="fleets_create")
    def post(self, request: Request) -> Response:
        fleet = fleets.fleet_create(actor=_actor(request), **_valid(FleetInput(data=request.data)))
        return Response(FleetOutput(fleet).data, status=status.HTTP_201_CREATED)


class FleetView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=FleetOutput, operation_id="fleets_get")
    def get(self, request: Request, name: str) -> Response:
        return Response(FleetOutput(selectors.fleet_for(request.user, name)).data)

    @extend_schema(
        responses={204: None},
        operation_id="fleets_delete",
        description="Refused (409) while a deployment is on the fleet, naming it.",
    )
    def delete(self, request: Request, name: str) -> Response:
        selectors.fleet_for(request.user, name)
        fleets.fleet_delete(actor=_actor(request), name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ReplicasView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(
        request=ReplicaInput, responses={201: ReplicaOutput}, operation_id="replicas_add"
    )
    def post(self, request: Request, name: str) -> Response:
        fleet = selectors.fleet_for(request.user, name)
        values = _valid(ReplicaInput(data=request.data))
        replica = fleets.replica_add(actor=_actor(request), fleet=fleet, **values)
        return Response(ReplicaOutput(replica).data, status=status.HTTP_201_CREATED)


class ReplicaView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(
        responses={204: None},
        operation_id="replicas_remove",
        description="Refused (409) for an active replica of a fleet that serves traffic: drain "
        "it first.",
    )
    def delete(self, request: Request, name: str, replica: str) -> Response:
        found = selectors.replica_of(request.user, name, replica)
        fleets.replica_remove(actor=_actor(request), replica_id=found.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ReplicaDrainView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(request=None, responses=ReplicaOutput, operation_id="replicas_drain")
    def post(self, request: Request, name: str, replica: str) -> Response:
        found = selectors.replica_of(request.user, name, replica)
        drained = fleets.replica_drain(actor=_actor(request), replica_id=found.pk)
        return Response(ReplicaOutput(drained).data)


# --- deployments ---------------------------------------------------------------------------------


class DeploymentsView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(
        responses=DeploymentOutput(many=True),
        operation_id="deployments_list",
        parameters=[OpenApiParameter("state", str, description="pending, ready, failed, …")],
    )
    def get(self, request: Request) -> Response:
        state = request.query_params.get("state", "")[:16]
        found = selectors.deployment_list(request.user, state=state)
        return Response(DeploymentOutput(found, many=True, context={"user": request.user}).data)

    @extend_schema(
        request=DeploymentInput,
        responses={201: DeploymentOutput},
        operation_id="deployments_create",
        description="A pending deployment of an artifact on a fleet. The workers load it (LoRA "
        "adapters through vLLM's runtime API) and probe every active replica with a real "
        "inference: poll GET …/deployments/{id} until `state` is ready (or failed, with "
        "`problems`).",
    )
    def post(self, request: Request) -> Response:
        values = _valid(DeploymentInput(data=request.data))
        family, _, version = values.pop("artifact").partition(":")
        artifact = ModelArtifact.objects.filter(family=family, version=version).first()
        if artifact is None:
            raise DomainError(f"artifact: no artifact {family}:{version} in the registry")
        try:
            fleet = selectors.fleet_for(request.user, values.pop("fleet"))
        except NotFound as exc:
            raise DomainError(f"fleet: {exc}") from exc
        deployment = deployments.deployment_create(
            actor=_actor(request), artifact=artifact, fleet=fleet, **values
        )
        body = DeploymentOutput(deployment, context={"user": request.user}).data
        return Response(body, status=status.HTTP_201_CREATED)


class DeploymentView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=DeploymentOutput, operation_id="deployments_get")
    def get(self, request: Request, deployment_id: int) -> Response:
        found = selectors.deployment_for(request.user, deployment_id)
        return Response(DeploymentOutput(found, context={"user": request.user}).data)

    @extend_schema(
        responses=DeploymentOutput,
        operation_id="deployments_delete",
        description="Retires the deployment (its row stays, with its history); refused (409) "
        "while a route, a rule or a live rollout uses it, naming them.",
    )
    def delete(self, request: Request, deployment_id: int) -> Response:
        selectors.deployment_for(request.user, deployment_id)
        retired = deployments.deployment_delete(actor=_actor(request), deployment_id=deployment_id)
        return Response(DeploymentOutput(retired, context={"user": request.user}).data)


# --- routes --------------------------------------------------------------------------------------


class RoutesView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=RouteOutput(many=True), operation_id="routes_list")
    def get(self, request: Request) -> Response:
        found = selectors.visible_routes(request.user).select_related(
            "baseline__artifact", "baseline__fleet", "canary__artifact", "canary__fleet"
        )
        context = {"user": request.user}
        return Response(
            RouteOutput(found.prefetch_related("tenants"), many=True, context=context).data
        )

    @extend_schema(request=RouteInput, responses={201: RouteOutput}, operation_id="routes_create")
    def post(self, request: Request) -> Response:
        values = _valid(RouteInput(data=request.data))
        baseline = Deployment.objects.filter(pk=values["baseline_deployment"]).first()
        if baseline is None:
            raise DomainError(f"baseline_deployment: no deployment {values['baseline_deployment']}")
        route = routes.route_create(
            actor=_actor(request),
            name=values["name"],
            baseline=baseline,
            stickiness=values["stickiness"],
            tenant_slugs=values["tenants"],
        )
        body = RouteOutput(route, context={"user": request.user}).data
        return Response(body, status=status.HTTP_201_CREATED)


class RouteView(APIView):
    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(responses=RouteOutput, operation_id="routes_get")
    def get(self, request: Request, route_name: str) -> Response:
        route = selectors.route_for(request.user, route_name)
        return Response(RouteOutput(route, context={"user": request.user}).data)

    @extend_schema(
        responses={204: None},
        operation_id="routes_delete",
        description="Refused (409) with a live rollout, traffic in the last 15 minutes, or a "
        "rollout history.",
    )
    def delete(self, request: Request, route_name: str) -> Response:
        selectors.route_for(request.user, route_name)
        routes.route_delete(actor=_actor(request), name=route_name)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Prometheus ----------------------------------------------------------------------------------


class ScrapeTargetsView(APIView):
    """Prometheus' `http_sd_configs` endpoint (a token with `rollouts:read`, e.g. a viewer's)."""

    permission_classes = PERMISSIONS
    required_scopes_by_method = SCOPES

    @extend_schema(
        responses=ScrapeTargetGroup(many=True),
        operation_id="prometheus_targets",
        description="Every active replica as a Prometheus target group, labelled with its fleet, "
        "its name and the deployments it serves: point `http_sd_configs` here.",
    )
    def get(self, request: Request) -> Response:
        return Response(selectors.scrape_targets(request.user))
