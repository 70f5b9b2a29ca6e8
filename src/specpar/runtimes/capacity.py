"""How many servers this machine can run at once, checked before a runtime starts any: a ConfigError naming the
limit, never a raw "can't start new thread" after hundreds were made.

The threads runtime starts one OS thread per server (a stack reserved in the address space, a task against
``RLIMIT_NPROC`` and the cgroup's ``pids.max``); a local Ray one process per server, about ``ACTOR_BYTES`` each.
A limit that cannot be read (another OS) is not checked.
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Iterator
from pathlib import Path

from specpar.core.errors import ConfigError

ACTOR_BYTES = 100 * 2**20  # one Ray actor process with a simulated server, resident (measured: 101-104 MB)
DEFAULT_STACK_BYTES = 8 * 2**20  # glibc's thread stack when RLIMIT_STACK is unlimited
_GIB = 2**30


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _proc_kb(path: str, field: str) -> int | None:
    """A ``kB`` field of a /proc file (/proc/self/status's VmSize, /proc/meminfo's MemAvailable), or None."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def stack_bytes() -> int:
    """The address space one new thread reserves for its stack."""
    size = threading.stack_size()
    if size:
        return size
    soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
    return DEFAULT_STACK_BYTES if soft == resource.RLIM_INFINITY else soft


def _cgroup_usage(controller: str, v2: tuple[str, str], v1: tuple[str, str]) -> Iterator[tuple[int, int]]:
    """(limit, in use) of ``controller`` in each cgroup of this process that sets both: read from the files ``v2``
    (limit, usage) in cgroup v2's unified tree, or ``v1`` in v1's ``/sys/fs/cgroup/<controller>`` tree."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, files = Path("/sys/fs/cgroup", path.lstrip("/")), v2
        elif controller in controllers.split(","):
            base, files = Path("/sys/fs/cgroup", controller, path.lstrip("/")), v1
        else:
            continue
        most, now = _read_int(base / files[0]), _read_int(base / files[1])
        if most is not None and now is not None:
            yield most, now


def _pids_left() -> tuple[int, str] | None:
    """Tasks the cgroup's pids.max still allows (cgroup v2, else v1's pids controller), or None."""
    for most, now in _cgroup_usage("pids", ("pids.max", "pids.current"), ("pids.max", "pids.current")):
        return most - now, f"the cgroup's pids.max ({most}, {now} in use)"
    return None


def task_limits() -> list[tuple[int, str]]:
    """(how many more threads or processes this process may start, the limit that says so), for each limit set."""
    limits = []
    pids = _pids_left()
    if pids is not None:
        limits.append(pids)
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if soft != resource.RLIM_INFINITY:
        mine = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else threading.active_count()
        limits.append((soft - mine, f"ulimit -u ({soft} tasks for this user; this process alone has {mine})"))
    return limits


def thread_limits() -> list[tuple[int, str]]:
    """Like :func:`task_limits`, for threads of this process: also its address space (``ulimit -v``)."""
    limits = task_limits()
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    used = _proc_kb("/proc/self/status", "VmSize")
    if soft != resource.RLIM_INFINITY and used is not None:
        stack = stack_bytes()
        left = (soft - used * 1024) // stack
        limits.append(
            (
                int(left),
                f"ulimit -v ({soft / _GIB:.2f} GiB of address space, {used * 1024 / _GIB:.2f} GiB in use; "
                f"{stack / 2**20:.0f} MiB of stack per thread)",
            )
        )
    return limits


def available_bytes() -> int | None:
    """Memory free for new processes now: MemAvailable, or less where this process's cgroup caps its memory."""
    free = _proc_kb("/proc/meminfo", "MemAvailable")
    free = None if free is None else free * 1024
    cap = _memory_cap_left()
    known = [x for x in (free, cap) if x is not None]
    return min(known) if known else None


def _memory_cap_left() -> int | None:
    """Bytes left under this process's cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes), or None."""
    v2, v1 = ("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes")
    for most, now in _cgroup_usage("memory", v2, v1):
        if most < 2**60:  # v1 writes "no limit" as a huge number
            return max(0, most - now)
    return None


def check_threads(n: int, what: str = "servers") -> None:
    """A ConfigError when ``n`` more threads (one per server on the threads runtime) exceed a limit of this process."""
    for left, why in thread_limits():
        if n > left:
            raise ConfigError(
                f"{n} {what} need {n} threads (one each on the threads runtime) but this process may start only "
                f"{max(left, 0)} more: {why}; lower sp_degree"
            )


def check_local_actors(n: int) -> None:
    """A ConfigError when ``n`` Ray actors (one process per server) do not fit this machine: its memory available
    now at ``ACTOR_BYTES`` each, or its process limits."""
    free = available_bytes()
    if free is not None and n * ACTOR_BYTES > free:
        raise ConfigError(
            f"{n} servers on a local Ray are {n} processes of about {ACTOR_BYTES / 2**20:.0f} MB each "
            f"({n * ACTOR_BYTES / _GIB:.1f} GiB) but {free / _GIB:.1f} GiB of memory is available: at most "
            f"{free // ACTOR_BYTES} fit; lower sp_degree, or join a cluster with --ray-address"
        )
    for left, why in task_limits():
        if n > left:
            raise ConfigError(
                f"{n} servers on a local Ray are {n} processes but only {max(left, 0)} more may start here: {why}; "
                "lower sp_degree"
            )


def check_servers(runtime, targets: int, drafters: int = 0) -> None:
    """Refuse, before any server is made, ``targets`` target and ``drafters`` drafter servers that the runtime a
    :class:`~specpar.core.config.RuntimeConfig` names cannot run on this machine: a thread per server, a process
    per Ray actor (the drafters in the driver are threads; a joined cluster is not checked here)."""
    if runtime.name == "threads":
        check_threads(targets + drafters)
    elif runtime.name == "ray":
        actors = targets + (drafters if runtime.drafter_placement == "actor" else 0)
        if runtime.address is None:
            check_local_actors(actors)
        check_threads(targets + drafters - actors, "drafter servers in the driver")
