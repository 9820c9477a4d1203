"""``python -m core``: the PruneScope command line."""

import sys

from core.cli import main

sys.exit(main())
