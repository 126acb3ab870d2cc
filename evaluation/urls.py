from django.urls import path

from evaluation import views

app_name = "evaluation"

urlpatterns = [
    path("<int:rollout_id>/report/", views.rollout_report, name="rollout-report"),
]
