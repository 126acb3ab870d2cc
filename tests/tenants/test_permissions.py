from typing import Any

import pytest
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIClient
from rest_framework.views import APIView

from tenants.choices import Scope
from tenants.models import User
from tenants.services.accounts import api_token_create


class NeedsTenantsWrite(APIView):
    required_scopes = (Scope.TENANTS_WRITE,)

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response({"ok": True})


urlpatterns = [path("needs-tenants-write", NeedsTenantsWrite.as_view())]


@pytest.fixture(autouse=True)
def _urls(settings: Any) -> None:
    settings.ROOT_URLCONF = __name__


def test_a_token_without_the_required_scope_is_refused_naming_the_scope(
    api_client: APIClient, ci_token: str
) -> None:
    response = api_client.get(
        "/needs-tenants-write", headers={"Authorization": f"Bearer {ci_token}"}
    )
    assert response.status_code == 403
    assert "tenants:write" in response.json()["detail"]


def test_a_token_with_the_scope_is_let_through(api_client: APIClient, ci_user: User) -> None:
    _, secret = api_token_create(
        actor=None, user=ci_user, name="admin", scopes=[Scope.TENANTS_WRITE]
    )
    response = api_client.get("/needs-tenants-write", headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 200
