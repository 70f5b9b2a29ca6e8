"""Servers the machine cannot run are refused before any starts, naming the limit (issue 32, 4e): before, 1,000
servers on threads under a memory cap ended in a raw "can't start new thread" after hundreds had started, and
`simulate --runtime ray --sp-degree 1000` started 166+ Ray worker processes on 2 cores and gave nothing in 180 s."""

from __future__ import annotations

import threading
import time

import pytest

from processes import run_python
from specpar import ConfigError, LatencyProfile, SimulatedModel, generate
from specpar.core.config import RuntimeConfig
from specpar.entrypoints.cli import main
from specpar.runtimes import Pool, ThreadRuntime, capacity


def pair():
    target = SimulatedModel(8, latency=LatencyProfile.uniform(0.2))
    return target, target.drafter(0.8, LatencyProfile.uniform(0.02))


def test_more_threads_than_a_limit_allows_are_refused_naming_it(monkeypatch):
    monkeypatch.setattr(capacity, "thread_limits", lambda: [(100, "ulimit -v (2.00 GiB of address space)")])
    target, drafter = pair()
    with pytest.raises(ConfigError, match=r"1001 servers need 1001 threads .* only 100 more: ulimit -v \(2.00 GiB"):
        generate([1, 2], target, drafter, algorithm="dsi", sp_degree=1000, runtime="threads", max_tokens=4)
    before = threading.active_count()
    out = generate([1, 2], target, drafter, algorithm="dsi", sp_degree=50, runtime="threads", max_tokens=4)
    assert out.tokens == target.greedy_tokens([1, 2], 4)  # within the limit: runs
    assert threading.active_count() <= before + 1


def test_a_thread_the_os_refuses_stops_those_started_and_is_one_config_error(monkeypatch):
    """A limit the checks cannot read: the OS refuses the 4th thread; the 3 started end, the servers are released."""
    target, _ = pair()
    pool = Pool([target.server(f"t{i}") for i in range(6)], "target")
    real_start, started = threading.Thread.start, []

    def start(self):
        if len(started) == 3:
            raise RuntimeError("can't start new thread")
        started.append(self)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(ConfigError, match="could start only 3 of the 6 threads its servers need"):
        ThreadRuntime([pool])
    monkeypatch.undo()
    for t in started:
        t.join(2)
    assert not any(t.is_alive() for t in started)
    with ThreadRuntime([pool]) as rt:  # the servers were released: a new runtime may claim them
        assert len(rt._threads) == 6


def test_a_local_ray_is_refused_what_memory_cannot_hold(monkeypatch):
    monkeypatch.setattr(capacity, "available_bytes", lambda: 8 * 2**30)
    with pytest.raises(ConfigError, match=r"1000 servers on a local Ray are 1000 processes .* at most 81 fit"):
        capacity.check_servers(RuntimeConfig(name="ray"), 1000, 1)
    capacity.check_servers(RuntimeConfig(name="ray"), 80, 1)  # the drafter in the driver: a thread
    with pytest.raises(ConfigError, match="at most 81 fit"):
        capacity.check_servers(RuntimeConfig(name="ray", drafter_placement="actor"), 80, 80)
    capacity.check_servers(RuntimeConfig(name="ray", address="auto"), 1000, 1)  # a cluster: its own resources
    capacity.check_servers(RuntimeConfig(name="virtual"), 1000, 1)  # nothing to start


def test_simulate_on_ray_is_refused_at_once_before_ray_starts(monkeypatch, capsys):
    monkeypatch.setattr(capacity, "available_bytes", lambda: 8 * 2**30)
    t0 = time.perf_counter()
    code = main(["simulate", "--runtime", "ray", "--sp-degree", "1000", "-N", "5", "--repeats", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "1000 servers on a local Ray are 1000 processes" in err and len(err.splitlines()) == 1
    assert time.perf_counter() - t0 < 5
    from specpar.runtimes.ray_cluster import started_here

    assert not started_here()


def test_real_model_commands_refuse_their_units_servers_before_loading(monkeypatch, capsys):
    """generate's Engine makes sp_degree + 1 units of a target and a drafter: 2,002 servers for --sp-degree 1000;
    refused before the models load (none are installed here: loading first would fail otherwise)."""
    monkeypatch.setattr(capacity, "thread_limits", lambda: [(500, "the cgroup's pids.max (600, 100 in use)")])
    for argv in (["generate", "--sp-degree", "300", "hi"], ["bench", "--sp-degree", "300", "-n", "1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "602 servers need 602 threads" in err and "pids.max" in err, err


@pytest.mark.slow
def test_under_a_real_address_space_cap_the_error_is_one_line():
    """In a process with ulimit -v 3 GiB: a ConfigError naming the cap, not a RuntimeError traceback."""
    code = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
from specpar import ConfigError, LatencyProfile, SimulatedModel, generate
t = SimulatedModel(8, latency=LatencyProfile.uniform(0.1))
try:
    generate([1, 2], t, t.drafter(0.8, LatencyProfile.uniform(0.01)), algorithm="dsi", sp_degree=1000,
             runtime="threads", max_tokens=4)
except ConfigError as exc:
    print("refused:", exc)
"""
    p = run_python(code, timeout=60)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "refused: 1001 servers need 1001 threads" in p.stdout and "ulimit -v (3.00 GiB" in p.stdout, p.stdout
