from django.urls import path

from tests.django_project.notes import views

urlpatterns = [
    path("notes/", views.create_note),
    path("notes/now/", views.create_note_without_transaction),
]
