"""``python -m benchmarks``: see `benchmarks.run`."""

import sys

from benchmarks.run import main

sys.exit(main())
