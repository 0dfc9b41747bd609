"""``python -m benchmarks``: see `benchmarks.run`; ``... django``, ``... postgres`` and
``... redis-footprint`` (`benchmarks.redis_footprint`): their own.

The Django section (`benchmarks.django_bench.run`) needs Python 3.12+ with
Django and its peers installed, and the PostgreSQL one (`benchmarks.postgres`)
its peers, so each is a run of its own.
"""

import sys

if sys.argv[1:2] == ["django"]:
    from benchmarks.django_bench.run import main as django_main

    sys.exit(django_main(sys.argv[2:]))
if sys.argv[1:2] == ["postgres"]:
    from benchmarks.postgres import main as postgres_main

    sys.exit(postgres_main(sys.argv[2:]))
if sys.argv[1:2] == ["redis-footprint"]:
    from benchmarks.redis_footprint import main as footprint_main

    sys.exit(footprint_main(sys.argv[2:]))

from benchmarks.run import main

sys.exit(main())
