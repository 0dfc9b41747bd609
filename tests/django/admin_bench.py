"""What the admin pages' tests share: the database migrated once, users by permission, URLs."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.urls import reverse

_migrated = False


def migrate() -> None:
    """The test database's tables (auth, admin, sessions...), made once per session."""
    global _migrated
    if not _migrated:
        call_command("migrate", verbosity=0)
        _migrated = True


def user(*permissions: str, staff: bool = True, password: str = "pw", name: str = "u") -> User:
    """A new user named `name` and a unique suffix, with `permissions` (codenames of
    threadmill_django)."""
    made = User.objects.create_user(
        username=f"{name}-{uuid.uuid4().hex[:6]}", password=password, is_staff=staff
    )
    for codename in permissions:
        made.user_permissions.add(
            Permission.objects.get(content_type__app_label="threadmill_django", codename=codename)
        )
    return made


VIEW = "view_taskqueue"
CHANGE = "change_taskqueue"


def url(page: str, *parts: str) -> str:
    """An admin page of threadmill's, its parts quoted as the pages quote them."""
    return reverse(f"admin:threadmill_django_taskqueue_{page}", args=[quote(p) for p in parts])


def text(response: Any) -> str:
    return str(response.content.decode())


def core_task(task: Any) -> Any:
    """The threadmill task a Django task is stored as (for `Broker.enqueue_many`), on its queue."""
    from threadmill_core.task import registered_task
    from threadmill_django import runner

    found = registered_task(runner.task_path(task))
    assert found is not None, "a decorated Django task is registered with threadmill"
    return found.using(queue=task.queue_name)
