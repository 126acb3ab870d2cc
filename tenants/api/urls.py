from django.urls import path

from tenants.api import views

urlpatterns = [
    path("me", views.MeView.as_view(), name="api-me"),
    path("tokens", views.ApiTokensView.as_view(), name="api-tokens"),
    path(
        "tokens/<int:token_id>/revoke", views.ApiTokenRevokeView.as_view(), name="api-token-revoke"
    ),
    path("tenants", views.TenantsView.as_view(), name="api-tenants"),
    path("tenants/<slug:slug>", views.TenantView.as_view(), name="api-tenant"),
    path("tenants/<slug:slug>/budget", views.BudgetView.as_view(), name="api-tenant-budget"),
    path("tenants/<slug:slug>/keys", views.ApiKeysView.as_view(), name="api-tenant-keys"),
    path(
        "tenants/<slug:slug>/keys/<int:key_id>/revoke",
        views.ApiKeyRevokeView.as_view(),
        name="api-tenant-key-revoke",
    ),
    path("tenants/<slug:slug>/usage", views.UsageView.as_view(), name="api-tenant-usage"),
]
