from django.urls import path

from rollouts.api import views

urlpatterns = [
    path("rollouts", views.RolloutsView.as_view(), name="api-rollouts"),
    path("rollouts/<int:rollout_id>", views.RolloutView.as_view(), name="api-rollout"),
    path(
        "rollouts/<int:rollout_id>/actions",
        views.RolloutActionView.as_view(),
        name="api-rollout-action",
    ),
]
