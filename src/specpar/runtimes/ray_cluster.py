"""Joining or starting the Ray cluster the Ray runtime runs on, and giving back what this process started.

Ray is an optional dependency (``pip install 'specpar[ray]'``), imported only when needed. :func:`connect` joins a
running cluster or starts a local one (no dashboard, a small object store, loopback only); :func:`shutdown`
disconnects, and stops a local Ray this process started (never a cluster it only joined: ``ray stop`` is the
owner's command); :func:`ray_session` does both around a command; :func:`local_cluster` starts several raylets on
this machine (a multi-node cluster for the tests and benchmarks), shut down by handle.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
from collections.abc import Sequence

from specpar.core.errors import ConfigError

log = logging.getLogger(__name__)

OBJECT_STORE_BYTES = 80 * 1024**2  # Ray's minimum is 75 MiB; calls and results are a few KB each
_state = {"started": False, "atexit": False, "reserved": 0.0}
# Ray starts its workers at nice 15 (background work); here they are the servers, the work itself: on a shared
# machine a target actor at nice 15 got 60% of its core while nice-19 jobs of others ran (measured)
SYSTEM_CONFIG = {"worker_niceness": 0}


def import_ray():
    """The ray module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            "the Ray runtime needs Ray: pip install 'specpar[ray]' (or pip install ray), then run again"
        ) from exc
    return ray


def connect(address: str | None = None, cpus: float = 0) -> None:
    """Join the cluster at ``address`` ("auto" or "HOST:PORT"), or start a local Ray with at least ``cpus``
    logical CPUs; a no-op when this process is already connected."""
    ray = import_ray()
    if ray.is_initialized():
        return
    if address:
        if address != "auto":
            check_reachable(address)
        try:
            ray.init(address=address, configure_logging=False, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise ConfigError(
                f"cannot join the Ray cluster at {address!r} ({exc}): start one with `ray start --head` "
                "or leave out --ray-address to run a local Ray"
            ) from exc
        log.info("joined the Ray cluster at %s", address)
        return
    ray.init(
        address="local",  # a new Ray, never one a `ray start` or a cluster_utils.Cluster left to join
        num_cpus=max(os.cpu_count() or 1, int(-(-max(cpus, _state["reserved"]) // 1))),
        include_dashboard=False,
        object_store_memory=OBJECT_STORE_BYTES,
        _node_ip_address="127.0.0.1",
        configure_logging=False,
        log_to_driver=False,
        _system_config=SYSTEM_CONFIG,
    )
    _state["started"] = True
    if not _state["atexit"]:
        atexit.register(shutdown)
        _state["atexit"] = True


def check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """A ConfigError at once when nothing listens at HOST:PORT (Ray itself would retry for minutes)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--ray-address must be 'auto' or HOST:PORT, got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(
            f"nothing answers at {address} ({exc}): start the head node there with `ray start --head --port "
            f"{port}`, or leave out --ray-address to run a local Ray"
        ) from exc


def started_here() -> bool:
    """Whether the Ray this process is connected to was started by :func:`connect` (local)."""
    return _state["started"]


def shutdown() -> None:
    """Disconnect from Ray; a local Ray this process started stops (its raylet and every actor)."""
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    _state["started"] = False


@contextlib.contextmanager
def ray_session(address: str | None = None, cpus: float = 0):
    """Ray for the duration of a command: joined on entry (``address``) or started by its first run, disconnected
    on exit; a Ray already connected before is left as it was. cpus: the logical CPUs the command's largest run
    needs, so that a comparison's first arm (non-SI: one server) does not size a local Ray for itself alone."""
    ray = import_ray()
    was_connected = ray.is_initialized()
    reserved = _state["reserved"]
    _state["reserved"] = max(reserved, cpus)
    if address and not was_connected:
        connect(address)
    try:
        yield
    finally:
        _state["reserved"] = reserved
        if not was_connected:
            shutdown()


@contextlib.contextmanager
def local_cluster(cpus_per_node: Sequence[int] = (2, 1, 1)):
    """A Ray cluster of one raylet per entry of ``cpus_per_node`` on this machine (the first the head), joined by
    this process for the duration and shut down by handle on exit. Yields the ``ray.cluster_utils.Cluster``. The
    address the head writes for any ``ray.init()`` to find is removed at once: only this process joins."""
    ray = import_ray()
    from ray._common.utils import reset_ray_address
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        raise ConfigError("local_cluster() needs a process not yet connected to Ray")
    node = {"object_store_memory": OBJECT_STORE_BYTES}
    cluster = Cluster()
    try:
        for i, cpus in enumerate(cpus_per_node):
            head = {"include_dashboard": False, "_system_config": SYSTEM_CONFIG} if i == 0 else {}
            cluster.add_node(num_cpus=cpus, **node, **head)
            if i == 0:
                reset_ray_address()
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, configure_logging=False, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
