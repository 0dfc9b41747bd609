from django.apps import AppConfig


class DjappConfig(AppConfig):
    name = "tests.django.djapp"
    label = "djapp"
