from django.apps import AppConfig


class DjangoBenchConfig(AppConfig):
    name = "benchmarks.django_bench"
    label = "django_bench"
