from django.urls import path

from evaluation.api import views

urlpatterns = [
    path("feedback", views.FeedbackView.as_view(), name="api-feedback"),
    path("rollouts/<int:rollout_id>/report", views.RolloutReportView.as_view(), name="api-report"),
    path(
        "rollouts/<int:rollout_id>/verdict",
        views.RolloutVerdictView.as_view(),
        name="api-verdict",
    ),
]
