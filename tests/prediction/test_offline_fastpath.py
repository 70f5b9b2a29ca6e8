"""The offline heatmaps' fast path against the event-driven simulator (specpar.generate on the virtual clock).

Run by run: the fast path reads the drafter's right/wrong positions off the very
simulated models the event simulator runs, and must give the same latency to
the last bit, for SI and DSI, including ties, queueing (Eq. 1 violated) and
lookaheads whose chunk outlasts a target pass. In distribution: on sampled cells
the fast path's own random draws give the statistics the event simulator gives.
"""

import math
import random
import statistics

import numpy as np
import pytest

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.experiments.heatmap import compute_heatmap, event_cell
from specpar.planning import min_lookahead
from specpar.prediction.fastpath import acceptance_uniforms, dsi_latency, next_rejection, si_counts, si_time


def drafter_right(target, drafter, prompt, n):
    """Whether the drafter's greedy token equals the target's at each of the n output positions."""
    h, right = target.prefix_hash(prompt), []
    for _ in range(n):
        m = target.argmax(h)
        right.append(drafter.argmax(h) == m)
        h = target.extend(h, m)
    return np.array(right)


def runs_of(right):
    """nz [1, n+1] for one run whose draft at position i is right iff right[i]."""
    return next_rejection(np.where(right, 0.0, 1.0)[None], [0.5])[0]


def configs():
    rng = random.Random(2024)
    # equal event times: a chunk arriving with a target pass, single servers, chunks longer than a target pass
    fixed = [
        (3, 0.5, 1.0, 2, 1),
        (30, 0.2, 0.3, 15, 2),
        (30, 0.5, 0.7, 8, 1),
        (40, 1.0, 0.8, 1, 7),
        (40, 0.2, 0.9, 5, 7),
        (40, 0.01, 0.95, 5, 7),
        (40, 0.01, 0.5, 15, 7),
        (25, 0.25, 0.9, 4, 1),
    ]
    out = [dict(n=n, c=c, a=a, k=k, sp=sp, seed=i) for i, (n, c, a, k, sp) in enumerate(fixed)]
    for i in range(48):
        c = rng.choice([rng.randint(1, 100) / 100, rng.random() or 0.5])
        k = rng.choice([1, 2, 3, 5, 5, 10, rng.randint(1, 30), min_lookahead(1.0, c, 7)])
        out.append(
            dict(
                n=rng.choice([1, 2, 5, 12, 40]),
                c=c,
                a=rng.choice([0.0, 0.5, 0.9, 1.0, rng.random()]),
                k=k,
                sp=rng.choice([1, 2, 3, 7]),
                seed=100 + i,
            )
        )
    return out


@pytest.mark.parametrize("cfg", configs(), ids=lambda d: "n{n}-c{c:.3g}-a{a:.2g}-k{k}-sp{sp}".format(**d))
def test_fast_path_equals_event_simulator_run_by_run(cfg):
    n, c, a, k, sp, seed = cfg["n"], cfg["c"], cfg["a"], cfg["k"], cfg["sp"], cfg["seed"]
    target = SimulatedModel(8, seed=seed, latency=LatencyProfile.uniform(1.0))
    drafter = target.drafter(a, LatencyProfile.uniform(c), seed=seed + 5)
    prompt = [seed % 8, 1]
    nz = runs_of(drafter_right(target, drafter, prompt, n))
    dsi = generate(prompt, target, drafter, algorithm="dsi", max_tokens=n, lookahead=k, sp_degree=sp)
    si = generate(prompt, target, drafter, algorithm="si", max_tokens=n, lookahead=k)
    assert dsi_latency(nz, [k], [c], n, sp)[0] == pytest.approx(dsi.time_ms, abs=1e-9)
    drafted, rounds = si_counts(nz, np.array([k]), n)
    assert si_time(drafted[0], rounds[0], c) == pytest.approx(si.time_ms, abs=1e-9)  # the event simulator's time


def test_lookahead_one_is_proposition_ones_pathwise_time():
    """With lookahead 1 and enough servers DSI takes t1 * accepted + T * rounds on every path (Prop. 1's proof)."""
    n, c = 60, 0.3
    u = acceptance_uniforms(200, n, seed=3)
    nz = next_rejection(u, [0.7])[0]
    got = dsi_latency(nz, np.ones(200, dtype=int), np.full(200, c), n, sp=4)
    right = u[:, :-1] < 0.7  # the last token is never drafted
    for i in range(200):
        accepted = rounds = 0
        p = 0
        while p < n:
            run = 0
            while p + run < n - 1 and right[i, p + run]:
                run += 1
            accepted += run
            rounds += 1
            p += run + 1
        assert got[i] == pytest.approx(c * accepted + rounds, abs=1e-9)


CELLS = [  # (c, a, lookahead, sp): Eq. 1's lookahead, lookahead 1, a chunk longer than a target pass, queueing
    (0.1, 0.8, 2, 7),
    (0.5, 0.3, 1, 7),
    (0.35, 0.9, 5, 7),
    (0.02, 0.7, 5, 7),
]


@pytest.mark.parametrize("c,a,k,sp", CELLS)
def test_fast_path_and_event_simulator_give_the_same_statistics(c, a, k, sp):
    n, event_runs, fast_runs = 40, 40, 4000
    fast = {"si": [], "dsi": []}
    nz = next_rejection(acceptance_uniforms(fast_runs, n, seed=11), [a])[0]
    drafted, rounds = si_counts(nz, np.full(fast_runs, k), n)
    fast["si"] = si_time(drafted, rounds, c)
    fast["dsi"] = dsi_latency(nz, np.full(fast_runs, k), np.full(fast_runs, c), n, sp)
    events = {"si": [], "dsi": []}
    for r in range(event_runs):
        one = event_cell(c, a, n=n, repeats=1, si_lookahead=k, dsi_lookahead=k, sp_degree=sp, seed=1000 + r)
        events["si"].append(one["si"])
        events["dsi"].append(one["dsi"])
    for algo in ("si", "dsi"):
        ev, fp = np.array(events[algo]), np.asarray(fast[algo])
        se = math.sqrt(ev.var(ddof=1) / len(ev) + fp.var(ddof=1) / len(fp))
        assert abs(ev.mean() - fp.mean()) <= 4 * se + 1e-9, (algo, ev.mean(), fp.mean(), se)
        assert statistics.stdev(ev) == pytest.approx(fp.std(ddof=1), rel=0.35, abs=0.05), algo


def test_compute_heatmap_cell_matches_a_direct_fast_path_run():
    """The grid's bookkeeping (batching, common draws, SI's best lookahead) against a direct computation."""
    h = compute_heatmap(c=[0.3], a=[0.6], n=30, repeats=7, lookaheads=(1, 12), seed=5)
    nz = next_rejection(acceptance_uniforms(7, 30, 5), [0.6])[0]
    si = []
    for k in range(1, 13):
        d, r = si_counts(nz, np.full(7, k), 30)
        si.append((d * 0.3 + r).mean())
    assert h.si[0, 0] == pytest.approx(min(si))
    assert h.si_lookahead[0, 0] == 1 + int(np.argmin(si))
    k = min_lookahead(1.0, 0.3, 7)
    assert h.dsi[0, 0] == pytest.approx(dsi_latency(nz, np.full(7, k), np.full(7, 0.3), 30, 7).mean())
    assert h.nonsi[0, 0] == 30
