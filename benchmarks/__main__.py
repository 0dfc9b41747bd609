"""``python -m benchmarks``: see `benchmarks.run`; ``python -m benchmarks django``: Django's.

The Django section (`benchmarks.django_bench.run`) needs Python 3.12+ with
Django and its peers installed, so it is a run of its own.
"""

import sys

if sys.argv[1:2] == ["django"]:
    from benchmarks.django_bench.run import main as django_main

    sys.exit(django_main(sys.argv[2:]))

from benchmarks.run import main

sys.exit(main())
