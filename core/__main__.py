"""``python -m core``: the PruneScope command line."""

import sys

from core.cli.main import main

sys.exit(main())
