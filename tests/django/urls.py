"""The tests' URLs: the admin, where threadmill_django's admin pages are."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
