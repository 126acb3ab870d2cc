"""The registry's REST API: one view per operation, each calling one service or selector."""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import ParseError
from rest_framework.generics import ListAPIView
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import DomainError, NotFound
from core.parsers import JSONParser
from registry import selectors, services
from registry.api import serializers as s
from registry.choices import EvalSource, Relation
from registry.evals import EvalFormatError, parse_lm_eval, parse_score_list
from registry.models import AliasMove, ModelArtifact, PromotionGate
from tenants.choices import Scope
from tenants.models import User
from tenants.permissions import ReleaseManagerWrites, TokenHasScopes

READ = (Scope.REGISTRY_READ,)
WRITE = (Scope.REGISTRY_WRITE,)


class RegistryView(APIView):
    permission_classes = [IsAuthenticated, TokenHasScopes, ReleaseManagerWrites]
    required_scopes_by_method = {"GET": READ, "HEAD": READ, "POST": WRITE, "PUT": WRITE}

    def actor(self, request: Request) -> User:
        return cast(User, request.user)


class ArtifactsView(ListAPIView[ModelArtifact]):
    """GET lists artifacts (paginated, filtered); POST registers one."""

    serializer_class = s.ArtifactOutput
    permission_classes = RegistryView.permission_classes
    required_scopes_by_method = RegistryView.required_scopes_by_method

    def get_queryset(self) -> Any:
        params = self.request.query_params
        return selectors.artifact_list(
            search=params.get("search", ""),
            family=params.get("family", ""),
            alias=params.get("alias", ""),
            format=params.get("format", ""),
        ).select_related("created_by")

    @extend_schema(
        operation_id="registry_artifact_list",
        parameters=[
            OpenApiParameter("search", str, description="in family, version or uri"),
            OpenApiParameter("family", str),
            OpenApiParameter("alias", str),
            OpenApiParameter("format", str),
        ],
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=s.ArtifactRegisterInput,
        responses={201: s.ArtifactOutput, 200: s.ArtifactOutput},
        operation_id="registry_artifact_register",
        description="Idempotent for CI: the same family, version and digest again answers 200 "
        "with the existing artifact; the same version with another digest is a 409.",
    )
    def post(self, request: Request) -> Response:
        data = s.ArtifactRegisterInput(data=request.data)
        data.is_valid(raise_exception=True)
        artifact, created = services.artifact_register(
            actor=cast(User, request.user), **data.validated_data
        )
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(s.ArtifactOutput(artifact).data, status=code)


class ArtifactDetailView(RegistryView):
    @extend_schema(responses=s.ArtifactOutput, operation_id="registry_artifact_get")
    def get(self, request: Request, family: str, version: str) -> Response:
        # The list's queryset, narrowed to one: its creator and aliases come with it.
        artifact = (
            selectors.artifact_list()
            .select_related("created_by")
            .filter(family=family, version=version)
            .first()
        )
        if artifact is None:
            raise NotFound(f"no artifact {family}:{version} is registered")
        return Response(s.ArtifactOutput(artifact).data)


class LineageView(RegistryView):
    @extend_schema(
        responses=s.LineageOutput,
        operation_id="registry_lineage_get",
        parameters=[
            OpenApiParameter(
                "depth",
                int,
                description=f"generations each way (default {selectors.NEAR_DEPTH}, "
                f"at most {selectors.MAX_DEPTH})",
            )
        ],
    )
    def get(self, request: Request, family: str, version: str) -> Response:
        artifact = services.artifact_get(family=family, version=version)
        # A dense graph's whole lineage can be tens of thousands of edges: the default answers
        # the usual question (where did this come from, what came of it) fast; ask for more.
        raw_depth = request.query_params.get("depth", str(selectors.NEAR_DEPTH))
        if not raw_depth.isdigit() or int(raw_depth) < 1:
            raise DomainError("depth must be a positive integer")
        return _lineage_response(artifact, min(int(raw_depth), selectors.MAX_DEPTH))

    @extend_schema(
        request=s.LineageAddInput, responses=s.LineageOutput, operation_id="registry_lineage_add"
    )
    def post(self, request: Request, family: str, version: str) -> Response:
        child = services.artifact_get(family=family, version=version)
        data = s.LineageAddInput(data=request.data)
        data.is_valid(raise_exception=True)
        links = [
            services.ParentLink(
                parent=_parent(p["family"], p["version"]), relation=Relation(p["relation"])
            )
            for p in data.validated_data["parents"]
        ]
        services.lineage_add(actor=self.actor(request), child=child, links=links)
        return _lineage_response(child, selectors.NEAR_DEPTH)


def _lineage_response(artifact: ModelArtifact, depth: int) -> Response:
    walk = selectors.lineage(artifact, max_depth=depth)
    names = {pk: str(a) for pk, a in walk.artifacts.items()}

    # The body is built as LineageOutput describes it (strings and an int), not through it: a full
    # walk of a dense lineage has tens of thousands of edges, and a serializer field per value
    # costs more than the walk itself.
    def edges(items: list[selectors.Edge]) -> list[dict[str, Any]]:
        return [
            {
                "child": names[child_id],
                "parent": names[parent_id],
                "relation": relation,
                "depth": depth,
            }
            for child_id, parent_id, relation, depth in items
        ]

    body = {
        "artifact": str(artifact),
        "ancestors": edges(walk.ancestors),
        "descendants": edges(walk.descendants),
    }
    return Response(body)


def _parent(family: str, version: str) -> ModelArtifact:
    parent = ModelArtifact.objects.filter(family=family, version=version).first()
    if parent is None:
        raise DomainError(f"unknown parent {family}:{version}: register it first")
    return parent


class ModelCardView(RegistryView):
    @extend_schema(
        request=s.ModelCardInput,
        responses=s.LineageOutput,
        operation_id="registry_lineage_import_model_card",
        description="Adds parents from the card's base_model / base_model_relation front matter.",
    )
    def post(self, request: Request, family: str, version: str) -> Response:
        child = services.artifact_get(family=family, version=version)
        data = s.ModelCardInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.lineage_import_model_card(
            actor=self.actor(request), child=child, card=data.validated_data["card"]
        )
        return _lineage_response(child, selectors.NEAR_DEPTH)


class LenientJSONParser(JSONParser):
    """lm-evaluation-harness writes NaN into its results files; they must upload as written."""

    strict = False


class EvalsView(RegistryView):
    parser_classes = [LenientJSONParser]

    @extend_schema(
        request={"application/json": {"type": "object"}},
        responses={201: s.EvalRunOutput},
        operation_id="registry_evals_upload",
        description="An lm-evaluation-harness results_<timestamp>.json as it is, or a list of "
        '{"task", "metric", "value", "stderr"?, "higher_is_better"?, "n_shot"?} objects.',
        parameters=[OpenApiParameter("suite", str, description="name for a plain score list")],
    )
    def post(self, request: Request, family: str, version: str) -> Response:
        artifact = services.artifact_get(family=family, version=version)
        size = int(request.META.get("CONTENT_LENGTH") or 0)
        limit = settings.EVAL_UPLOAD_MAX_BYTES
        if size > limit:
            return Response(
                {"detail": f"upload too large: {size} bytes; at most {limit}"},
                status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            )
        try:
            payload = request.data
        except ParseError as exc:
            raise DomainError(f"the body is not valid JSON: {exc.detail}") from exc
        try:
            if isinstance(payload, dict):
                parsed, source = parse_lm_eval(payload), EvalSource.LM_EVAL
            elif isinstance(payload, list):
                suite = request.query_params.get("suite", "")
                parsed, source = parse_score_list(payload, suite=suite), EvalSource.SCORES
            else:
                raise EvalFormatError("expected a results object or a list of scores")
        except EvalFormatError as exc:
            raise DomainError(str(exc)) from exc
        run = services.eval_run_record(
            actor=self.actor(request), artifact=artifact, parsed=parsed, source=source
        )
        body = {"run": run.pk, "suite": run.suite, "scores": len(parsed.scores)}
        return Response(s.EvalRunOutput(body).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses=s.ComparisonOutput, operation_id="registry_evals_compare")
    def get(self, request: Request, family: str, version: str) -> Response:
        artifact = services.artifact_get(family=family, version=version)
        comparison = selectors.score_comparison(artifact)
        body = {
            "artifact": str(artifact),
            "parent": str(comparison.parent) if comparison.parent else None,
            "production": str(comparison.production) if comparison.production else None,
            "scores": comparison.rows,
        }
        return Response(s.ComparisonOutput(body).data)


class AliasView(RegistryView):
    @extend_schema(
        request=s.AliasMoveInput, responses=s.AliasOutput, operation_id="registry_alias_move"
    )
    def put(self, request: Request, family: str, name: str) -> Response:
        data = s.AliasMoveInput(data=request.data)
        data.is_valid(raise_exception=True)
        artifact = services.artifact_get(family=family, version=data.validated_data["version"])
        services.alias_move(
            actor=self.actor(request),
            family=family,
            name=name,
            artifact=artifact,
            reason=data.validated_data["reason"],
        )
        return self.get(request, family, name)

    @extend_schema(responses=s.AliasOutput, operation_id="registry_alias_get")
    def get(self, request: Request, family: str, name: str) -> Response:
        target = selectors.alias_target(family, name)
        if target is None:
            return Response(
                {"detail": f"{family} has no alias {name!r}"}, status=status.HTTP_404_NOT_FOUND
            )
        history = AliasMove.objects.filter(family=family, name=name).select_related(
            "from_artifact", "to_artifact"
        )
        body = {"family": family, "name": name, "version": target.version, "history": history}
        return Response(s.AliasOutput(body).data)


class GatesView(RegistryView):
    @extend_schema(request=s.GatesInput, responses=s.GatesInput, operation_id="registry_gates_set")
    def put(self, request: Request, family: str) -> Response:
        data = s.GatesInput(data=request.data)
        data.is_valid(raise_exception=True)
        specs = [services.GateSpec(**gate) for gate in data.validated_data["gates"]]
        services.gates_set(actor=self.actor(request), family=family, gates=specs)
        return self.get(request, family)

    @extend_schema(responses=s.GatesInput, operation_id="registry_gates_get")
    def get(self, request: Request, family: str) -> Response:
        gates = PromotionGate.objects.filter(family=family).values(
            "task", "metric", "filter", "min_value", "max_regression"
        )
        return Response({"gates": list(gates)})


class GateCheckView(RegistryView):
    @extend_schema(responses=s.GateReportOutput, operation_id="registry_gates_check")
    def get(self, request: Request, family: str, version: str) -> Response:
        artifact = services.artifact_get(family=family, version=version)
        return _gate_report(artifact, status.HTTP_200_OK)


def _gate_report(artifact: ModelArtifact, code: int) -> Response:
    report = selectors.gates_check(artifact)
    body = {
        "artifact": str(artifact),
        "passed": report.passed,
        "overridden": artifact.overrides.exists(),
        "results": report.results,
    }
    return Response(s.GateReportOutput(body).data, status=code)


class GateOverrideView(RegistryView):
    @extend_schema(
        request=s.GateOverrideInput,
        responses={201: s.GateReportOutput},
        operation_id="registry_gates_override",
    )
    def post(self, request: Request, family: str, version: str) -> Response:
        artifact = services.artifact_get(family=family, version=version)
        data = s.GateOverrideInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.gate_override(
            actor=self.actor(request), artifact=artifact, reason=data.validated_data["reason"]
        )
        return _gate_report(artifact, status.HTTP_201_CREATED)
