"""``manage.py place_orders N [--seconds S]``: enqueue N shipments, print their result ids."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from orders.tasks import ship_order


class Command(BaseCommand):
    help = "Enqueue N ship_order tasks; prints one result id a line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("count", type=int)
        parser.add_argument("--first", type=int, default=0, help="number of the first order")
        parser.add_argument("--seconds", type=float, default=0.0, help="how long each takes")

    def handle(self, *_args: Any, count: int, first: int, seconds: float, **_options: Any) -> None:
        for order in range(first, first + count):
            result = ship_order.enqueue(order, seconds=seconds)
            self.stdout.write(result.id)
