"""``python -m specpar``: the command line (see specpar.cli)."""

import sys

from specpar.cli import main

sys.exit(main())
