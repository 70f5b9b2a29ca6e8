"""Many requests at once on a fixed set of processing units (docs/load.md): the units, the :class:`Scheduler`
that splits them among requests, a request's pause at a safe point, one request from arrival to its last token.
The same code runs an engine's threads and the simulator's greenlets: only the clock it is given differs.
"""

from specpar.scheduling.request import Request
from specpar.scheduling.scheduler import LoadMetrics, Scheduler, WallClock
from specpar.scheduling.units import Unit

__all__ = ["LoadMetrics", "Request", "Scheduler", "Unit", "WallClock"]
