from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from controlplane import health, metrics, views
from tenants import views as tenant_views

api_v1 = [
    path("", include("tenants.api.urls")),
    path("registry/", include("registry.api.urls")),
    path("", include("rollouts.api.urls")),
    path("", include("evaluation.api.urls")),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("registry/", include("registry.urls")),
    path("rollouts/", include("rollouts.urls")),
    path("rollouts/", include("evaluation.urls")),
    path("tenants/", include("tenants.urls")),
    path("account/tokens/", tenant_views.api_tokens, name="api-tokens-page"),
    path("account/tokens/new", tenant_views.api_token_create, name="api-token-create"),
    path(
        "account/tokens/<int:token_id>/revoke",
        tenant_views.api_token_revoke,
        name="api-token-revoke",
    ),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
