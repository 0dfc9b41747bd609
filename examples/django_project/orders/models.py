from django.db import models


class Shipment(models.Model):
    """One run of `ship_order`: a task that ran twice (its worker died) leaves two rows."""

    order = models.IntegerField(db_index=True)
    attempt = models.IntegerField()
    pid = models.IntegerField()
    shipped_at = models.DateTimeField(auto_now_add=True)
