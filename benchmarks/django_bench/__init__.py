"""``python -m benchmarks django``: threadmill through Django's task API, against Django's peers.

The systems, each through Django's own API (``task.enqueue()``) and run by
its project's own worker command, one process with one thread:
threadmill_django on Redis, django-tasks-redis, django-tasks-db and
django-ox on PostgreSQL; and threadmill through its own API, to show what
the adapter costs. The workload is the main benchmark's (`benchmarks.peers`
`_common`): each task INCRs a counter in Redis, which the harness polls to
time a drain. See `benchmarks.django_bench.run`.
"""
