"""The online experiment: pair profile JSON, feasible lookaheads, the table's figures, and ``specpar table``.

No timing is asserted on threads (speed goals live in benchmarks/); the thread
runs check that every algorithm returns the target's own tokens there too.
"""

import json

import pytest

from specpar.backends import LatencyProfile
from specpar.core.errors import ConfigError
from specpar.entrypoints.cli import main
from specpar.experiments.online import feasible_lookaheads, run_online
from specpar.prediction.pair_profile import PairProfile, default_profile_path, load_default_profile


def pair(t=2.0, d=0.3, a=0.8, ttft=None):
    return PairProfile("T", "D", LatencyProfile(ttft or t, t), LatencyProfile(d, d), a)


def test_profile_json_round_trip_and_accepted_variants(tmp_path):
    p = pair(ttft=5.0)
    path = tmp_path / "p.json"
    p.save(path)
    assert PairProfile.load(path) == p
    nested = {
        "target": {"name": "t", "latency": {"ttft_ms": 9, "tpot_ms": 3}},
        "drafter": {"name": "d", "latency": {"tpot_ms": 1}},
        "acceptance": {"rate": 0.7},
        "device": "cpu",
    }
    q = PairProfile.from_dict(nested)
    assert (q.target.ttft_ms, q.target.tpot_ms, q.drafter.ttft_ms, q.acceptance_rate) == (9, 3, 1, 0.7)
    assert q.meta == {"acceptance": {"rate": 0.7}, "device": "cpu"}
    assert q.drafter_fraction == pytest.approx(1 / 3)


def test_reads_the_file_specpar_profile_writes(tmp_path):
    from specpar.prediction.pair_profile import FORMAT
    from specpar.prediction.profile_cache import write

    prof = {
        "format": FORMAT,
        "prompts": 5,
        "target": {"name": "qwen2.5-coder-1.5b", "ttft_ms": 300.0, "tpot_ms": 120.0, "per_token_ms": 9.0},
        "drafter": {"name": "qwen2.5-coder-0.5b", "ttft_ms": 90.0, "tpot_ms": 45.0, "per_token_ms": 3.0},
        "acceptance_rate": {"geometric": 0.71, "direct": 0.8, "mean_exact_prefix": 2.4},
    }
    write(tmp_path / "profile.json", prof)
    p = PairProfile.load(tmp_path / "profile.json")
    assert p.label == "qwen2.5-coder-1.5b / qwen2.5-coder-0.5b"
    assert (p.target.ttft_ms, p.target.tpot_ms, p.target.per_token_ms, p.acceptance_rate) == (300, 120, 9, 0.71)
    assert PairProfile.load(tmp_path / "profile.json", "direct").acceptance_rate == 0.8


@pytest.mark.parametrize(
    "d,words",
    [
        ({"drafter": {"tpot_ms": 1}, "acceptance_rate": 0.5}, "missing 'target'"),
        (
            {"target": {"tpot_ms": 2}, "drafter": {"ttft_ms": 1}, "acceptance_rate": 0.5},
            "'drafter' needs a number tpot_ms",
        ),
        ({"target": {"tpot_ms": 2}, "drafter": {"tpot_ms": 1}}, "missing 'acceptance_rate'"),
        (
            {"target": {"tpot_ms": 2}, "drafter": {"tpot_ms": 1}, "acceptance_rate": 1.5},
            "acceptance_rate must be in [0, 1]",
        ),
        (
            {"target": {"tpot_ms": -2}, "drafter": {"tpot_ms": 1}, "acceptance_rate": 0.5},
            "must be a number of ms in [0, ",
        ),
    ],
)
def test_bad_profiles_are_named(d, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
        PairProfile.from_dict(d)


def test_unreadable_profile_file_is_named(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        PairProfile.load(tmp_path / "bad.json")
    with pytest.raises(ConfigError, match="cannot read profile"):
        PairProfile.load(tmp_path / "missing.json")


def test_default_profile_lives_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPAR_CACHE", str(tmp_path))
    assert default_profile_path() == tmp_path / "profiles" / "default-pair.json"
    assert load_default_profile() is None
    pair().save(default_profile_path())
    assert load_default_profile() == pair()


def test_lookaheads_follow_eq1_with_at_most_sp_servers():
    # c = 0.05: lookahead 1 needs 20 servers, 5 needs 4, 10 needs 2 (Eq. 1; no per-token cost, none kept)
    assert feasible_lookaheads(pair(t=2.0, d=0.1), (1, 5, 10), 7) == [(5, 4), (10, 2)]
    # c = 0.5: two verifications of single drafts overlap; chunks of 5 and 10 take longer to draft than a
    # target pass, so one verifies at a time
    assert feasible_lookaheads(pair(t=2.0, d=1.0), (1, 5, 10), 7) == [(1, 2), (5, 1), (10, 1)]
    # a per-token cost: catch-up counted, and one server kept for the cursor (DSI keeps one there)
    costly = PairProfile("T", "D", LatencyProfile(2.0, 2.0, 0.02), LatencyProfile(0.1, 0.1), 0.8)
    assert feasible_lookaheads(costly, (5, 10), 7) == [(5, 6), (10, 4)]  # ceil(1.98 / 0.4) + 1, ceil(1.98 / 0.8) + 1
    with pytest.raises(ConfigError, match="no lookahead in"):
        run_online(pair(t=2.0, d=0.01), lookaheads=(1, 5), repeats=1)


def test_virtual_runtime_table_dsi_wins():
    t = run_online(pair(t=10.0, d=1.0, a=0.9), n=50, repeats=4, runtime="virtual")
    assert [r.lookahead for r in t.rows] == [5, 10] and t.infeasible == [1]
    for row in t.rows:
        s = t.speedups(row)
        assert s["dsi_vs_nonsi"].value > 1 and s["dsi_vs_si"].value > 1
        assert s["dsi_vs_si"].value == pytest.approx(sum(row.si_ms) / sum(row.dsi_ms))  # the ratio of mean times


def test_threads_run_the_same_tokens_as_the_virtual_clock(no_thread_leak):
    t = run_online(pair(t=1.0, d=0.2, a=0.7), n=12, repeats=2, lookaheads=(1, 5))
    assert len(t.nonsi_ms) == 2 and all(len(r.dsi_ms) == 2 and len(r.si_ms) == 2 for r in t.rows)
    assert all(x > 0 for r in t.rows for x in r.dsi_ms)


def test_table_command_json_with_profile_file(tmp_path, capsys, monkeypatch, no_thread_leak):
    monkeypatch.setenv("SPECPAR_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "p.json"
    pair(t=1.0, d=0.3).save(path)
    assert main(["table", "--profile", str(path), "-N", "8", "--repeats", "1", "--lookaheads", "1", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["lookahead"] for r in out["tables"][0]["rows"]] == [1, 5]
    assert "not available" in out["note"]


def test_simulate_reads_a_saved_pair_profile(tmp_path, capsys):
    """Both JSON forms work everywhere a profile is read: here the plain one PairProfile.save writes."""
    path = tmp_path / "p.json"
    PairProfile("T", "D", LatencyProfile(4.0, 2.0, 0.5), LatencyProfile(0.4, 0.2), 0.65).save(path)
    assert main(["simulate", "--profile", str(path), "-N", "20", "--repeats", "1", "-k", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["config"]
    assert out["acceptance_rate"] == 0.65
    assert (out["target"]["ttft_ms"], out["target"]["tpot_ms"], out["target"]["per_token_ms"]) == (4.0, 2.0, 0.5)
    assert (out["drafter"]["ttft_ms"], out["drafter"]["tpot_ms"]) == (0.4, 0.2)


def test_table_command_needs_a_pair(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPECPAR_CACHE", str(tmp_path))
    assert main(["table"]) == 2
    err = capsys.readouterr().err
    assert "no pair to measure" in err and "default model pair's profile is not available" in err
    assert main(["table", "--target-tpot", "2"]) == 2
    assert "needs --target-tpot, --drafter-tpot and -a" in capsys.readouterr().err
