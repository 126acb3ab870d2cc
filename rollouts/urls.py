from django.urls import path

from rollouts import fleet_views, route_views, template_views, views

app_name = "rollouts"

urlpatterns = [
    path("", views.rollout_list, name="rollout-list"),
    path("new/", views.rollout_create, name="rollout-create"),
    path("<int:rollout_id>/", views.rollout_detail, name="rollout-detail"),
    path("<int:rollout_id>/actions/", views.rollout_action, name="rollout-action"),
    path("routes/", route_views.route_list, name="route-list"),
    path("routes/new/", route_views.route_create, name="route-create"),
    path("fleets/", fleet_views.fleet_list, name="fleet-list"),
    path("fleets/new/", fleet_views.fleet_create, name="fleet-create"),
    path("fleets/<slug:name>/replicas/", fleet_views.replica_add, name="replica-add"),
    path(
        "fleets/<slug:name>/replicas/<slug:replica>/<str:action>/",
        fleet_views.replica_change,
        name="replica-change",
    ),
    path("deployments/new/", fleet_views.deployment_create, name="deployment-create"),
    path(
        "deployments/<int:deployment_id>/delete/",
        fleet_views.deployment_delete,
        name="deployment-delete",
    ),
    # Route names may hold slashes (org/model): the rule paths come first.
    path("routes/<path:name>/rules/", route_views.route_rule_add, name="route-rule-add"),
    path(
        "routes/<path:name>/rules/<str:rule_name>/delete/",
        route_views.route_rule_delete,
        name="route-rule-delete",
    ),
    path(
        "routes/<path:name>/rules/<str:rule_name>/",
        route_views.route_rule_edit,
        name="route-rule-edit",
    ),
    path("routes/<path:name>/", route_views.route_detail, name="route-detail"),
    path("templates/", template_views.template_list, name="template-list"),
    path("templates/<slug:name>/", template_views.template_detail, name="template-detail"),
    path("templates/<slug:name>/delete/", template_views.template_delete, name="template-delete"),
]
