from django.urls import path

from rollouts.api import plan_templates, rules, views

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
    path("plan-templates", plan_templates.PlanTemplatesView.as_view(), name="api-plan-templates"),
    path(
        "plan-templates/<str:name>",
        plan_templates.PlanTemplateView.as_view(),
        name="api-plan-template",
    ),
]
