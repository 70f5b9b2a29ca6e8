"""Many requests at once on a fixed set of processing units (docs/design.md, "Speculation under load").

* :mod:`~specpar.scheduling.units`: a processing unit and the servers on it; the pools a share gives an algorithm;
* :mod:`~specpar.scheduling.pausing`: a request's stop conditions plus the scheduler's pause at a safe point;
* :mod:`~specpar.scheduling.scheduler`: the :class:`Scheduler` that owns the units and splits them among requests
  (:mod:`specpar.planning.load`'s policy), and its metrics;
* :mod:`~specpar.scheduling.request`: one request from arrival to its last token, one configuration after another.

The same code runs a real engine (threads, wall time) and the simulator under load (greenlets on one
:class:`~specpar.runtimes.shared_clock.SharedClock`): only the clock it is given differs.
"""

from specpar.scheduling.request import Request
from specpar.scheduling.scheduler import LoadMetrics, Scheduler, WallClock
from specpar.scheduling.units import Unit

__all__ = ["LoadMetrics", "Request", "Scheduler", "Unit", "WallClock"]
