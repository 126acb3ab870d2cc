from django.urls import path

from evaluation.api import views

urlpatterns = [
    path("feedback", views.FeedbackView.as_view(), name="api-feedback"),
]
