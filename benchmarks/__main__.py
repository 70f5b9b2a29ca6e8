"""``python -m benchmarks [NAME [options]]``: :func:`benchmarks.runner.main`."""

import sys

from benchmarks.runner import main

sys.exit(main())
