from django.urls import path

from tenants import views

app_name = "tenants"

urlpatterns = [
    path("", views.tenant_list, name="tenant-list"),
    path("new/", views.tenant_create, name="tenant-create"),
    path("<slug:slug>/", views.tenant_dashboard, name="tenant-dashboard"),
    path("<slug:slug>/usage.csv", views.usage_export, name="usage-export"),
    path("<slug:slug>/keys/", views.api_key_create, name="api-key-create"),
    path("<slug:slug>/keys/<int:key_id>/revoke/", views.api_key_revoke, name="api-key-revoke"),
    path("<slug:slug>/budget/", views.budget_edit, name="budget-edit"),
]
