"""``python -m benchmarks``: see `benchmarks.run` (``... postgres``: `benchmarks.postgres`)."""

import sys

if sys.argv[1:2] == ["postgres"]:
    from benchmarks.postgres import main as postgres_main

    sys.exit(postgres_main(sys.argv[2:]))

from benchmarks.run import main

sys.exit(main())
