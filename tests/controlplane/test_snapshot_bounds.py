"""Values the gateway's snapshot schema refuses are refused where people enter them: the models
carry the schema's bounds, so the forms, the API, the admin and the services all say so."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.test import Client
from rest_framework.test import APIClient

from gateway import snapshot as schema
from rollouts.models import Deployment
from tenants.forms import BudgetForm
from tenants.models import Budget, Tenant, User
from tenants.services.budgets import budget_set
from tests.factories import DeploymentFactory, FleetFactory
from tests.registry.factories import register

AT_LEAST_ONE = "Ensure this value is greater than or equal to 1."


def _schema_minimum(model: type[schema.Frozen], name: str) -> int | None:
    prop = model.model_json_schema()["properties"][name]
    for option in [prop, *prop.get("anyOf", [])]:
        if "minimum" in option:
            return int(option["minimum"])
    return None


def _model_minimum(field: models.Field[Any, Any]) -> int | None:
    limits = [v.limit_value for v in field.validators if isinstance(v, MinValueValidator)]
    return max(limits) if limits else None


@pytest.mark.parametrize(
    ("model", "snapshot_model", "at_least_one"),
    [
        (Budget, schema.Budget, {"default_output_allowance"}),
        (Deployment, schema.Deployment, {"max_model_len", "max_in_flight_per_replica"}),
    ],
)
def test_the_models_lower_bounds_are_the_snapshot_schemas(
    model: type[models.Model], snapshot_model: type[schema.Frozen], at_least_one: set[str]
) -> None:
    compared = set()
    for name in snapshot_model.model_fields:
        minimum = _schema_minimum(snapshot_model, name)
        if minimum is None or name not in {f.name for f in model._meta.fields}:
            continue
        field = model._meta.get_field(name)
        assert isinstance(field, models.Field)
        assert _model_minimum(field) == minimum, name
        compared.add(name)
    assert compared >= at_least_one


def test_the_budget_form_refuses_a_zero_default_output_allowance(db: None) -> None:
    form = BudgetForm(
        data={
            "over_max_output": "clamp",
            "default_output_allowance": 0,
            "soft_limit_action": "reject",
        },
        routes=[],
    )
    assert not form.is_valid()
    assert form.errors["default_output_allowance"] == [AT_LEAST_ONE]


def test_budget_set_refuses_a_zero_default_output_allowance(
    tenant_a: Tenant, redis_client: redis.Redis
) -> None:
    with pytest.raises(ValidationError) as refused:
        budget_set(actor=None, tenant=tenant_a, default_output_allowance=0)
    assert refused.value.message_dict == {"default_output_allowance": [AT_LEAST_ONE]}


def test_the_budget_api_refuses_a_zero_default_output_allowance(
    api_client: APIClient, release_manager: User, tenant_a: Tenant
) -> None:
    api_client.force_login(release_manager)
    response = api_client.patch(
        "/api/v1/tenants/tenant-a/budget", {"default_output_allowance": 0}, format="json"
    )
    assert response.status_code == 400
    assert "default_output_allowance" in response.json()


def test_the_admin_refuses_a_deployment_with_a_zero_context_or_in_flight_limit(
    client: Client, release_manager: User
) -> None:
    fleet = FleetFactory.create(name="gpu-a")
    deployment = DeploymentFactory.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="chat-v1"
    )
    client.force_login(release_manager)
    fields = {
        "artifact": deployment.artifact_id,
        "fleet": fleet.pk,
        "served_model_name": "chat-v1",
        "kind": "full",
        "state": "pending",
        "kv_cache_usage": "0",
        "waiting_requests": "0",
    }
    response = client.post(
        f"/admin/rollouts/deployment/{deployment.pk}/change/",
        {**fields, "max_model_len": "0", "max_in_flight_per_replica": "0"},
    )
    assert response.status_code == 200  # the form again, with its errors
    errors = response.context["adminform"].form.errors
    assert errors["max_model_len"] == [AT_LEAST_ONE]
    assert errors["max_in_flight_per_replica"] == [AT_LEAST_ONE]
    deployment.refresh_from_db()
    assert (deployment.max_model_len, deployment.max_in_flight_per_replica) == (None, 256)
