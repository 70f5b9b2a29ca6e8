"""Runtimes (docs/design.md, layer 4): run tasks on servers. They know nothing of tokens.

The contract (:class:`Runtime`): ``submit(pool, call)`` queues a task for any idle server of a pool, ``wait()``
returns the next finished task, ``cancel(task)`` drops a queued or running task, ``now()`` reads the clock in ms.
Importing the Ray runtime does not import Ray (an optional dependency); constructing one does. :func:`make_runtime`
builds the one a :class:`~specpar.core.config.RuntimeConfig` names.
"""

import dataclasses
import inspect
from collections.abc import Sequence

from specpar.core.config import RuntimeConfig
from specpar.core.errors import ConfigError
from specpar.runtimes.base import Pool, Runtime, Task, TaskRecord
from specpar.runtimes.ray_runtime import RayOptions, RayRuntime
from specpar.runtimes.threads import ThreadRuntime
from specpar.runtimes.virtual import VirtualRuntime

RUNTIMES = {"virtual": VirtualRuntime, "threads": ThreadRuntime, "ray": RayRuntime}


def make_runtime(config: RuntimeConfig, pools: Sequence[Pool], ready_made: bool = False) -> Runtime:
    """The runtime ``config`` names, over ``pools``. ready_made: the servers outlive this generation (an Engine's, a
    ready-made Pool), so their Ray actors are kept for later runs."""
    options = dict(config.options)
    _check_options(RUNTIMES.get(config.name, ThreadRuntime), {k: v for k, v in options.items() if k != "clock"})
    if config.call_timeout_s is not None and config.name != "virtual":
        options["call_timeout_s"] = config.call_timeout_s
    if config.name == "virtual":
        if options.get("clock") is not None:  # one generation among many on a shared clock (under load)
            from specpar.runtimes.shared_clock import ClockRuntime

            return ClockRuntime(pools, config.cancel_frees, link_ms=config.link_ms, **options)
        return VirtualRuntime(pools, config.cancel_frees, link_ms=config.link_ms, **options)
    if config.name == "ray":
        local = ("drafter",) if config.drafter_placement == "driver" else ()  # no round trip per draft call
        link = config.link_ms.get("target", 0.0) if isinstance(config.link_ms, dict) else config.link_ms
        options = {"reuse_actors": ready_made, "local_pools": local, "inject_link_ms": link, **options}
        return RayRuntime(pools, cpus_per_server=config.cpus_per_server, placement=config.placement, **options)
    return ThreadRuntime(pools, **options)


def _check_options(cls, options) -> None:
    """A ConfigError naming the runtime options ``cls`` does not take (before: a TypeError from its constructor): the
    fields of its ``options_type``, else its constructor's keywords."""
    if cls.options_type is not None:
        known = [f.name for f in dataclasses.fields(cls.options_type)]
    else:
        params = inspect.signature(cls.__init__).parameters
        kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        known = [n for n, p in params.items() if n not in ("self", "pools") and p.kind in kinds]
    unknown = sorted(str(k) for k in options if k not in known)
    if unknown:
        raise ConfigError(
            f"the {cls.name} runtime takes no option {', '.join(map(repr, unknown))}: its options are {', '.join(known)}"
        )


__all__ = [
    "Pool",
    "Runtime",
    "Task",
    "TaskRecord",
    "VirtualRuntime",
    "ThreadRuntime",
    "RayRuntime",
    "RayOptions",
    "RUNTIMES",
    "RuntimeConfig",
    "make_runtime",
]
