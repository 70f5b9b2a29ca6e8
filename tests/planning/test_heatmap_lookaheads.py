"""DSI's lookahead per cell, in the heatmaps and for ``lookahead="auto"``: the fastest of those satisfying the paper's
Eq. 1 on the servers given, and so never slower than SI where SI's best lookahead satisfies it (two servers or more;
on one, DSI's pass on the cursor delays a chunk that drafts slower than a target pass: tests/planning/test_planning.py)."""

import numpy as np
import pytest

from specpar.core.latency import LatencyProfile
from specpar.experiments.heatmap import compute_heatmap, valid_lookaheads
from specpar.planning import min_lookahead
from specpar.planning.lookahead import satisfies_eq1
from specpar.prediction.fastpath import acceptance_uniforms, dsi_latency, next_rejection
from specpar.prediction.lookahead_choice import choose_lookahead

N, REPEATS = 60, 5


def si_lookahead_valid(h) -> np.ndarray:
    """[C, A]: whether SI's best lookahead in each cell satisfies Eq. 1 on the heatmap's servers."""
    return np.array(
        [[satisfies_eq1(1.0, float(c), int(k), h.sp_degree) for k in row] for c, row in zip(h.c, h.si_lookahead)]
    )


def test_valid_lookaheads_are_eq1s_from_the_smallest_up_to_n_minus_1():
    assert valid_lookaheads(0.01, 7, (1, 200), 100) == list(range(15, 100))  # ceil(1 / 0.07) = 15
    assert valid_lookaheads(0.5, 7, (1, 200), 100)[0] == 1
    assert valid_lookaheads(0.01, 7, (1, 10), 100) == [15]  # the smallest even beyond the range: the only choice
    assert valid_lookaheads(0.01, 7, (20, 30), 100) == list(range(20, 31))


@pytest.mark.slow
@pytest.mark.parametrize("sp", [2, 7])
def test_heatmap_dsi_takes_the_fastest_valid_lookahead_of_each_cell(sp):
    cs = [0.01, 0.05, 0.2, 0.6]
    h = compute_heatmap(c=cs, a=[0.3, 0.7, 0.95], n=N, repeats=REPEATS, sp_degree=sp)
    nz = next_rejection(acceptance_uniforms(REPEATS, N, 0), h.a)  # the heatmap's draws
    for i, c in enumerate(cs):
        ks = valid_lookaheads(c, sp, (1, 200), N)
        for j in range(len(h.a)):
            means = [dsi_latency(nz[j], np.full(REPEATS, k), np.full(REPEATS, c), N, sp).mean() for k in ks]
            assert h.dsi[i, j] == pytest.approx(min(means), abs=1e-12)
            assert h.dsi_lookahead[i, j] in ks and h.sp_needed[i, j] <= sp


@pytest.mark.slow
@pytest.mark.parametrize("sp", [2, 3, 7])
def test_heatmap_dsi_is_never_slower_than_si_where_sis_best_lookahead_is_valid(sp):
    h = compute_heatmap(12, n=N, repeats=REPEATS, sp_degree=sp)
    valid = si_lookahead_valid(h)
    assert valid.sum() > 50  # the check covers many cells
    assert (h.dsi[valid] <= h.si[valid] + 1e-9).all()
    assert (h.dsi <= h.nonsi + 1e-9).all()  # Theorem 1, every cell


@pytest.mark.slow
def test_the_smallest_valid_lookahead_alone_would_be_slower_than_si_where_sis_is_valid():
    """Control: DSI at Eq. 1's smallest lookahead (what the heatmap took before) loses to SI in cells where SI's
    lookahead is valid, so the check above can fail."""
    sp = 2
    h = compute_heatmap(12, n=N, repeats=REPEATS, sp_degree=sp)
    valid = si_lookahead_valid(h)
    slower = 0
    for i, c in enumerate(h.c):
        smallest = compute_heatmap(
            c=[float(c)], a=h.a, n=N, repeats=REPEATS, sp_degree=sp, fixed_lookahead=min_lookahead(1.0, float(c), sp)
        )
        slower += int((valid[i] & (smallest.dsi[0] > h.si[i] + 1e-9)).sum())
    assert slower > 0


@pytest.mark.slow
@pytest.mark.parametrize("c", [0.02, 0.1, 0.4])
@pytest.mark.parametrize("a", [0.5, 0.9])
@pytest.mark.parametrize("sp", [2, 7])
def test_lookahead_auto_is_the_fastest_valid_and_no_slower_than_si_where_sis_is_valid(c, a, sp):
    t, d = LatencyProfile.uniform(1.0), LatencyProfile.uniform(c)
    dsi = choose_lookahead(t, d, a, sp, 80)
    si = choose_lookahead(t, d, a, 1, 80, algorithm="si")
    assert dsi.valid == [k for k in range(1, 80) if satisfies_eq1(1.0, c, k, sp)] and dsi.valid[0] == min_lookahead(
        1.0, c, sp
    )
    assert dsi.predicted_ms[dsi.lookahead] == min(dsi.predicted_ms[k] for k in dsi.valid)
    if si.lookahead in dsi.valid:  # predicted on the same draws
        assert dsi.predicted_ms[dsi.lookahead] <= si.predicted_ms[si.lookahead] + 1e-9


@pytest.mark.slow
def test_lookahead_auto_counts_a_server_kept_for_the_cursor_only_where_dsi_keeps_one():
    t, d = LatencyProfile.uniform(1.0), LatencyProfile.uniform(0.1)
    free = choose_lookahead(t, d, 0.8, 4, 40)
    assert free.method == "fast path" and free.valid[0] == 3  # Eq. 1: 4 x 3 x 0.1 >= 1
    kept = choose_lookahead(t, d, 0.8, 4, 40, dedicated_cursor=True)
    assert kept.method == "virtual clock" and kept.valid[0] == 4  # 3 verifying: 3 x 4 x 0.1 >= 1
    costly = LatencyProfile(1.0, 1.0, 0.01)  # a per-token cost: DSI keeps one by default
    assert choose_lookahead(costly, d, 0.8, 4, 40).valid[0] == 4  # ceil(0.99 / (3 x 0.09))
