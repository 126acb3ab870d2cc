from django.urls import path

from registry import views

app_name = "registry"

urlpatterns = [
    path("", views.artifact_list, name="artifact-list"),
    path("<slug:family>/<str:version>/", views.artifact_detail, name="artifact-detail"),
    path("<slug:family>/<str:version>/alias/", views.alias_move, name="alias-move"),
]
