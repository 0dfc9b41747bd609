from django.db import migrations, models


# Django's own form for migrations: class attributes that are lists.
class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []  # noqa: RUF012  # Django reads it from the class

    operations = [  # noqa: RUF012  # Django reads it from the class
        migrations.CreateModel(
            name="Shipment",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False)),
                ("order", models.IntegerField(db_index=True)),
                ("attempt", models.IntegerField()),
                ("pid", models.IntegerField()),
                ("shipped_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
