"""``python -m threadmill_core.cli``: the ``threadmill`` command."""

import sys

from threadmill_core.cli.commands import main

sys.exit(main())
