from django.urls import path

from tenants.api.views import MeView

urlpatterns = [
    path("me", MeView.as_view(), name="api-me"),
]
