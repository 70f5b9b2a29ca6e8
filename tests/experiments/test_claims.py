"""The claims report: its PASS/FAIL rules fail on figures that break a claim, and the theorems hold on a coarse grid."""

import json

import numpy as np
import pytest

from specpar.entrypoints.cli import main
from specpar.experiments.claims import (
    FAIL,
    MISSING,
    NOTE,
    PARTIAL,
    PASS,
    CellRecheck,
    Table2Row,
    check_amdahl,
    check_fig2a,
    check_fig2b,
    check_fig2b_strict,
    check_fig2d,
    check_sp_vs_mp,
    check_table2,
    check_theorem1,
    check_theorem2,
    measure_grid,
    reproduce,
)
from specpar.experiments.heatmap import grid


def recheck(si, dsi, se):
    return CellRecheck(c=0.1, a=0.5, lookahead_si=3, lookahead_dsi=3, sp_degree=7, si_ms=si, dsi_ms=dsi, se_ms=se)


def test_theorem1_check_fails_when_dsi_is_slower_than_nonsi_anywhere():
    assert check_theorem1(1.0, "", "cmd").status == PASS
    assert check_theorem1(1.7, "", "cmd").status == PASS
    assert check_theorem1(0.999, "", "cmd").status == FAIL


def test_theorem2_check_fails_only_on_a_significant_slowdown():
    assert check_theorem2(1.0, [], "cmd").status == PASS
    assert check_theorem2(0.99, [recheck(10.0, 10.02, 0.05)], "cmd").status == PASS  # noise of 5 repeats
    assert check_theorem2(0.95, [recheck(10.0, 10.02, 0.05), recheck(10.0, 10.5, 0.05)], "cmd").status == FAIL
    assert check_fig2b(0.95, [recheck(10.0, 10.5, 0.05)], 7, "cmd").status == FAIL
    assert check_fig2b_strict(0.95, [recheck(10.0, 10.5, 0.05)], 7, "cmd").status == NOTE  # reported, never a FAIL


def test_fig2d_check_wants_about_1_6():
    assert check_fig2d(1.6, "", "cmd").status == PASS
    assert check_fig2d(1.5, "", "cmd").status == PASS
    assert check_fig2d(1.2, "", "cmd").status == FAIL
    assert check_fig2d(2.5, "", "cmd").status == FAIL


def test_fig2a_check_fails_when_si_beats_nonsi_with_a_useless_or_slow_drafter():
    c, a = grid(10)
    s = np.ones((len(c), len(a)))
    s[:, a == 0] = 0.9
    s[c == 1.0] = 0.8
    s[np.ix_(c <= 0.1, a >= 0.8)] = 2.0
    s[c == 1.0, -1] = 1.0  # a perfect drafter at c = 1 is exempt
    assert check_fig2a(s, c, a, "cmd").status == PASS
    bad = s.copy()
    bad[3, 0] = 1.1  # SI faster with a = 0
    assert check_fig2a(bad, c, a, "cmd").status == FAIL
    bad = s.copy()
    bad[-1, 4] = 1.05  # SI faster with a drafter as slow as the target
    assert check_fig2a(bad, c, a, "cmd").status == FAIL
    bad = s.copy()
    bad[0, -2] = 0.99  # SI slower with a fast, accurate drafter
    assert check_fig2a(bad, c, a, "cmd").status == FAIL


def test_sp_vs_mp_and_amdahl_checks_fail_on_wrong_figures():
    assert check_sp_vs_mp(0.36, 3.0, "cmd").status == PASS
    assert check_sp_vs_mp(0.50, 3.0, "cmd").status == FAIL
    assert check_amdahl({10: 2.8, 100: 4.7, 10000: 4.98}, "cmd").status == PASS
    assert check_amdahl({10: 2.8, 100: 4.7, 10000: 4.0}, "cmd").status == FAIL  # not 5x
    assert check_amdahl({10: 5.5, 100: 4.7, 10000: 5.0}, "cmd").status == FAIL  # not growing with N


def test_table2_check_marks_missing_inputs_and_fails_out_of_range():
    rows = [Table2Row("x", 0.1, 0.9), Table2Row("y", None, 0.93)]
    assert check_table2(rows, {}, "cmd").status == MISSING
    assert check_table2(rows, {"x": {"speedup": 1.5}}, "cmd").status == PARTIAL
    assert check_table2(rows[:1], {"x": {"speedup": 1.5}}, "cmd").status == PASS
    assert check_table2(rows, {"x": {"speedup": 1.05}}, "cmd").status == FAIL
    assert "MISSING drafter latency" in check_table2(rows, {}, "cmd").measured


@pytest.mark.slow
def test_theorems_hold_on_a_coarse_grid():
    g = measure_grid(resolution=8, n=60, repeats=5, sp_degree=7)
    for h in (g.fig2, g.fig7):
        assert (h.dsi <= h.nonsi + 1e-9).all()  # Theorem 1, every run averaged
    assert check_theorem2(float(g.theorem2_ratio.min()), g.theorem2_rechecks, "cmd").status == PASS
    assert (g.fig7.speedup("dsi_vs_si") > 1 - 1e-9).all()


@pytest.mark.slow
def test_reproduce_reports_every_claim_with_a_command():
    claims = reproduce(resolution=6, n=40, repeats=3, only=["theorem1", "fig2d", "fig2a", "table2"])
    assert [c.key for c in claims] == ["theorem1", "fig2d", "fig2a", "table2"]
    assert all(c.command.startswith("specpar ") and c.measured for c in claims)
    assert {c.key: c.status for c in claims}["theorem1"] == PASS
    assert {c.key: c.status for c in claims}["table2"] == MISSING


@pytest.mark.slow
def test_reproduce_command_prints_json_and_exit_status(capsys):
    assert main(["reproduce", "--only", "amdahl", "table2", "--phi3-acceptance", "0.6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    statuses = {c["key"]: c["status"] for c in out["claims"]}
    assert statuses == {"amdahl": PASS, "table2": PARTIAL}


def test_reproduce_rejects_bad_table2_input(capsys):
    assert main(["reproduce", "--only", "table2", "--table2-row", "x", "2.0", "0.5"]) == 2
    assert "0 < c <= 1" in capsys.readouterr().err


@pytest.mark.slow
def test_fig2b_at_resolution_20_passes_under_the_authors_protocol_and_the_stricter_comparison_says_where_not():
    """Issue 32, item 1. Under the authors' protocol (SI's lookaheads filtered by Eq. 1 on 7 servers too, as their
    heatmap code does: at c = 0.01 SI then runs k = 15 at nearly every acceptance rate, as DSI does) DSI is no
    slower than SI in any cell: PASS. Against SI at its unrestricted best (a stricter comparison than the paper's)
    the c = 0.01 row stays slower, reported as a NOTE with its cells and cause."""
    g = measure_grid(resolution=20, n=100, repeats=5, sp_degree=7)
    eq1 = g.fig2.speedup("dsi_vs_si_eq1")
    assert (eq1 >= 1 - 1e-9).all() and not g.fig2b_eq1_rechecks
    assert (g.fig2.si_eq1 >= g.fig2.si - 1e-12).all()  # a restricted SI is never faster than its unrestricted best
    assert (g.fig2.si_eq1_lookahead[0] == 15).mean() > 0.8  # c = 0.01: Eq. 1's smallest, as in the authors' runs
    claim = check_fig2b(float(eq1.min()), g.fig2b_eq1_rechecks, 7, "cmd")
    assert claim.status == PASS and "the authors' protocol" in claim.statement and "Eq. 1 on 7" in claim.statement
    s = g.fig2.speedup("dsi_vs_si")
    c_min = g.fig2.c[0]
    assert (s[1:] >= 1 - 1e-9).all()  # every drafter latency but the fastest: DSI no slower than SI
    bad = [r for r in g.fig2b_rechecks if r.significantly_slower]
    assert bad, "the c = 0.01 row, where the paper's Eq. 1 admits only k >= 15 on 7 servers, stays slower than SI"
    for r in bad:
        assert r.c == c_min and r.lookahead_dsi >= 15 and r.lookahead_si < 15 and not r.si_lookahead_valid
        assert r.si_at_dsi_lookahead_ms > r.dsi_ms > r.si_ms  # that lookahead costs SI more than DSI loses
        assert r.relaxed_lookahead < 15 and r.relaxed_ms < r.si_ms  # a shorter lookahead on 7 servers wins
    strict = check_fig2b_strict(float(s.min()), g.fig2b_rechecks, 7, "cmd")
    assert strict.status == NOTE and "admits only lookaheads >= 15" in strict.measured
    assert "in none of them does SI's best lookahead satisfy Eq. 1" in strict.measured
    # the control: the same slower cells judged as the claim would FAIL it (the protocol is what makes it pass)
    assert check_fig2b(float(s.min()), g.fig2b_rechecks, 7, "cmd").status == FAIL


def test_fig2b_words_name_cells_where_sis_lookahead_was_valid():
    """The explanation must not hide a slower cell DSI could have avoided (SI's lookahead satisfying Eq. 1)."""
    avoidable = CellRecheck(0.1, 0.5, 3, 4, 7, 10.0, 10.5, 0.05, si_at_dsi_lookahead_ms=10.6)
    assert avoidable.si_lookahead_valid  # 7 x 3 x 0.1 >= 1
    forced = CellRecheck(0.01, 0.5, 3, 15, 7, 10.0, 10.5, 0.05, si_at_dsi_lookahead_ms=10.6)
    assert not forced.si_lookahead_valid
    assert (
        "in 1 of them does SI's best lookahead satisfy Eq. 1" in check_fig2b(0.9, [avoidable, forced], 7, "").measured
    )


@pytest.mark.parametrize("command,default", [("reproduce", 50), ("heatmap", 100)])
def test_help_states_the_default_resolution_the_command_uses(command, default):
    from specpar.entrypoints.cli.main import build_parser

    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]
    assert sub.get_default("resolution") == default
    assert f"(default {default}:" in " ".join(sub.format_help().split())
