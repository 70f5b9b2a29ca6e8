"""Runtimes (docs/design.md, layer 4): run tasks on servers. They know nothing of tokens.

The contract (:class:`Runtime`): ``submit(pool, call)`` queues a task for any idle
server of a pool, ``wait()`` returns the next finished task, ``cancel(task)``
drops a queued or running task, ``now()`` reads the clock in ms. A runtime for
Ray actors (:mod:`specpar.runtimes.ray_runtime`, each server in its own process) implements the same four
methods; importing it does not import Ray (an optional dependency), constructing one does.
"""

from specpar.runtimes.base import Pool, Runtime, Task, TaskRecord
from specpar.runtimes.ray_runtime import RayRuntime
from specpar.runtimes.threads import ThreadRuntime
from specpar.runtimes.virtual import VirtualRuntime

RUNTIMES = {"virtual": VirtualRuntime, "threads": ThreadRuntime, "ray": RayRuntime}

__all__ = ["Pool", "Runtime", "Task", "TaskRecord", "VirtualRuntime", "ThreadRuntime", "RayRuntime", "RUNTIMES"]
