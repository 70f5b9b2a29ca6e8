"""Shared helpers: simulated target/drafter pairs and a guard against leaked worker threads."""

from __future__ import annotations

import sys
import threading

import pytest

from processes import Processes
from specpar import LatencyProfile, SimulatedModel


def make_pair(seed: int = 0, a: float = 0.8, c: float = 0.1, target_ms: float = 1.0, vocab: int = 8, **target_kw):
    """A simulated target with uniform latency ``target_ms`` and a drafter at fraction ``c`` with rate ``a``."""
    target = SimulatedModel(vocab, seed=seed, latency=LatencyProfile.uniform(target_ms), **target_kw)
    return target, target.drafter(a, LatencyProfile.uniform(c * target_ms), seed=seed + 1000)


def specpar_threads(since: set[threading.Thread] | frozenset = frozenset()) -> list[threading.Thread]:
    """specpar's worker threads alive now, except those in ``since`` (the threads alive when a test started: a test
    answers for the threads it started, found by identity, not for another's, e.g. a cancelled llama.cpp pass an
    earlier test left to finish on its own)."""
    return [t for t in threading.enumerate() if t.name.startswith("specpar-") and t.is_alive() and t not in since]


@pytest.fixture
def no_thread_leak():
    """Fails the test if a specpar worker thread it started is still alive when it ends; yields the threads alive
    before it (give them to :func:`specpar_threads`)."""
    before = set(threading.enumerate())
    yield before
    assert specpar_threads(before) == [], f"worker threads left running: {specpar_threads(before)}"


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    """specpar's cache (converted models, machine profiles) in a folder of the test's own: what a command finds
    there (a profile of the tiny models measured by an earlier run, say) cannot change what it does. Only for tests
    whose models are not the default pair's (those would be converted again)."""
    monkeypatch.setenv("SPECPAR_CACHE", str(tmp_path / "specpar-cache"))


@pytest.fixture
def processes():
    """Start a test's subprocesses with ``processes.start(argv, **popen_kw)``: each in a process group of its own,
    with default signal dispositions, killed with its group at teardown whatever happened (tests/processes.py)."""
    tracker = Processes()
    try:
        yield tracker
    finally:
        tracker.end_all()


@pytest.fixture(scope="session")
def ray_local():
    """One Ray for the whole test session, stopped at the end by handle (never `ray stop`): a cluster of 3 raylets
    on this machine (``ray.cluster_utils.Cluster``: the head with 2 logical CPUs and two worker nodes with 1 each,
    4 in all: tests give each server 0.25), so that every Ray test runs on a multi-node cluster and placement
    across nodes is tested too. Skips when Ray is not installed (CI installs it with the test extra)."""
    pytest.importorskip("ray")
    from specpar.runtimes.ray_cluster import local_cluster

    with local_cluster(cpus_per_node=(2, 1, 1)) as cluster:
        yield cluster


RAY_OPTIONS = {"cpus_per_server": 0.25}  # up to 16 servers in the session's 4 logical CPUs (8 on the head)


@pytest.fixture
def no_residual_update(monkeypatch):
    """The biased control of the tree distribution tests: every sibling is tested against the target's original p
    (no norm(max(0, p - q)) between siblings), in SI's whole-tree step and DSI's one-position step alike."""
    import specpar.algorithms.generation as generation
    import specpar.algorithms.verification as verification

    original = verification.judge_siblings

    def without_residual_update(draws, tokens, row, decoding, position):
        if decoding.greedy or len(draws) < 2:
            return original(draws, tokens, row, decoding, position)
        for j, (child, q_row) in enumerate(draws):
            x = tokens[child]
            if decoding.uniform(verification.sibling_stream(verification.ACCEPT, j), position) * q_row[x] < row[x]:
                return child, x
        return None, verification.sample(verification.residual(row, draws[-1][1]), decoding.uniform(3, position))

    monkeypatch.setattr(verification, "judge_siblings", without_residual_update)
    monkeypatch.setattr(generation, "judge_siblings", without_residual_update)


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory):
    """(target dir, drafter dir): the tiny transformers pair saved to disk, once per test module (torch imported
    only by the tests that ask for it)."""
    from tiny_transformers import save_tiny_pair

    return save_tiny_pair(tmp_path_factory.mktemp("tiny"))


def pytest_unconfigure(config):
    """llama-cpp-python opens /dev/null twice when imported (llama_cpp/_utils.py, for its suppress_stdout_stderr
    helper) and never closes them: after a run that imported it, two ResourceWarnings ("unclosed file ... /dev/null")
    at the interpreter's exit. Closed here, after the last test (specpar calls llama.cpp's functions itself, never
    that helper)."""
    utils = sys.modules.get("llama_cpp._utils")
    for name in ("outnull_file", "errnull_file"):
        f = getattr(utils, name, None)
        if f is not None:
            f.close()
