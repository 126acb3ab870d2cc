from django.urls import path

from registry.api import views

ARTIFACT = "artifacts/<slug:family>/<str:version>"

urlpatterns = [
    path("artifacts", views.ArtifactsView.as_view(), name="api-artifacts"),
    path(ARTIFACT, views.ArtifactDetailView.as_view(), name="api-artifact"),
    path(f"{ARTIFACT}/lineage", views.LineageView.as_view(), name="api-lineage"),
    path(f"{ARTIFACT}/model-card", views.ModelCardView.as_view(), name="api-model-card"),
    path(f"{ARTIFACT}/evals", views.EvalsView.as_view(), name="api-evals"),
    path(f"{ARTIFACT}/gates", views.GateCheckView.as_view(), name="api-gate-check"),
    path(f"{ARTIFACT}/gates/override", views.GateOverrideView.as_view(), name="api-gate-override"),
    path("families/<slug:family>/aliases/<slug:name>", views.AliasView.as_view(), name="api-alias"),
    path("families/<slug:family>/gates", views.GatesView.as_view(), name="api-gates"),
]
