from django.urls import path

from rollouts.api import infrastructure, plan_templates, rules, views

urlpatterns = [
    path("rollouts", views.RolloutsView.as_view(), name="api-rollouts"),
    path("rollouts/<int:rollout_id>", views.RolloutView.as_view(), name="api-rollout"),
    path(
        "rollouts/<int:rollout_id>/actions",
        views.RolloutActionView.as_view(),
        name="api-rollout-action",
    ),
    path("routes/<path:route_name>/rules", rules.RouteRulesView.as_view(), name="api-route-rules"),
    path(
        "routes/<path:route_name>/rules/<str:rule_name>",
        rules.RouteRuleView.as_view(),
        name="api-route-rule",
    ),
    path("routes", infrastructure.RoutesView.as_view(), name="api-routes"),
    # After the rule paths: a route name may hold slashes.
    path("routes/<path:route_name>", infrastructure.RouteView.as_view(), name="api-route"),
    path("fleets", infrastructure.FleetsView.as_view(), name="api-fleets"),
    path("fleets/<slug:name>", infrastructure.FleetView.as_view(), name="api-fleet"),
    path("fleets/<slug:name>/replicas", infrastructure.ReplicasView.as_view(), name="api-replicas"),
    path(
        "fleets/<slug:name>/replicas/<slug:replica>",
        infrastructure.ReplicaView.as_view(),
        name="api-replica",
    ),
    path(
        "fleets/<slug:name>/replicas/<slug:replica>/drain",
        infrastructure.ReplicaDrainView.as_view(),
        name="api-replica-drain",
    ),
    path("deployments", infrastructure.DeploymentsView.as_view(), name="api-deployments"),
    path(
        "prometheus/targets",
        infrastructure.ScrapeTargetsView.as_view(),
        name="api-prometheus-targets",
    ),
    path(
        "deployments/<int:deployment_id>",
        infrastructure.DeploymentView.as_view(),
        name="api-deployment",
    ),
    path("plan-templates", plan_templates.PlanTemplatesView.as_view(), name="api-plan-templates"),
    path(
        "plan-templates/<str:name>",
        plan_templates.PlanTemplateView.as_view(),
        name="api-plan-template",
    ),
]
