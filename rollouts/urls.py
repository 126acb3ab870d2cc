from django.urls import path

from rollouts import views

app_name = "rollouts"

urlpatterns = [
    path("", views.rollout_list, name="rollout-list"),
    path("new/", views.rollout_create, name="rollout-create"),
    path("<int:rollout_id>/", views.rollout_detail, name="rollout-detail"),
    path("<int:rollout_id>/actions/", views.rollout_action, name="rollout-action"),
]
