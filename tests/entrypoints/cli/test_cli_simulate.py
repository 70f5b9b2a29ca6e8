"""`specpar simulate`: table and JSON output, every flag documented."""

import json

import pytest

from specpar.entrypoints.cli.main import build_parser, main


def test_json_output_has_all_three_algorithms_and_the_closed_forms(capsys):
    assert main(["simulate", "--json", "-N", "30", "--repeats", "3", "-a", "0.8", "-c", "0.1", "--sp-degree", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    # -k auto: DSI's lookahead satisfies Eq. 1 on SP = 5 target servers: 5 x k x 0.1 >= 1, k >= 2
    ks = out["config"]["lookahead"]
    assert ks["dsi"] >= 2 and ks["si"] >= 1 and "auto" in out["config"]["lookahead_choice"]
    assert res_lookahead(out, "dsi") == ks["dsi"] and res_lookahead(out, "si") == ks["si"]
    res = out["results"]
    assert set(res) >= {"nonsi", "si", "dsi"}
    assert res["nonsi"]["mean_ms"] == 30 * 30.0
    assert all(res[a]["same_tokens_as_nonsi"] for a in ("si", "dsi"))
    assert res["dsi"]["speedup_vs_nonsi"] > res["si"]["speedup_vs_nonsi"] > 1
    assert out["closed_forms"]["si_expected_ms"] > 0


def res_lookahead(out, algo):
    return out["results"][algo]["lookahead"]


def test_a_given_lookahead_is_used_by_both(capsys):
    assert main(["simulate", "--json", "-N", "20", "--repeats", "1", "-k", "3", "--sp-degree", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert res_lookahead(out, "si") == res_lookahead(out, "dsi") == 3
    assert out["config"]["lookahead_choice"] == "given; Eq. 1 needs SP >= 4"  # c = 0.1: ceil(1 / (3 x 0.1)) = 4
    assert main(["simulate", "--json", "-N", "20", "--repeats", "1", "-k", "4", "--sp-degree", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["lookahead_choice"] == "given"  # 3 x 4 x 0.1 >= 1


def test_table_output_and_threads_runtime(capsys):
    assert main(["simulate", "-N", "15", "--repeats", "1", "--target-tpot", "2", "--runtime", "threads"]) == 0
    text = capsys.readouterr().out
    assert "lookahead " in text and "auto: DSI the fastest" in text and "threads" in text
    first_cells = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    headers = [c.strip() for line in text.splitlines() if line.startswith("┃") for c in line.split("┃")[1:-1]]
    # one row per algorithm, or (a table wider than the console, printed turned) one column per algorithm
    assert first_cells == ["non-SI", "SI", "DSI"] or headers[1:] == ["non-SI", "SI", "DSI"], text


def test_slow_drafter_warns_in_the_output(capsys):
    assert main(["simulate", "-N", "10", "--repeats", "1", "-c", "1.5"]) == 0
    assert "Assumption 2" in capsys.readouterr().out


def test_help_explains_every_flag():
    sub = build_parser()._subparsers._group_actions[0].choices["simulate"]
    for action in sub._actions:
        if action.option_strings and action.dest != "help":
            assert action.help and len(action.help) > 10, f"{action.option_strings} has no explanation"


@pytest.mark.slow
def test_timeline_png_is_drawn_for_each_algorithm(tmp_path, capsys):
    png = tmp_path / "timeline.png"
    assert main(["simulate", "-N", "20", "--repeats", "2", "-o", str(png), "--json"]) == 0
    json.loads(capsys.readouterr().out)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # three panels of bars, not an empty canvas


@pytest.mark.slow
def test_plan_prints_the_candidates_and_picks_the_fastest_valid(capsys):
    assert main(["plan", "-c", "0.05", "-a", "0.9", "--sp-degree", "7", "-N", "60", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    dsi, si = out["dsi"], out["si"]
    assert dsi["valid"][0] == 3  # Eq. 1: 7 servers x 3 x 0.05 >= 1
    assert dsi["lookahead"] in dsi["valid"] and dsi["method"] == "fast path"
    assert dsi["predicted_ms"][str(dsi["lookahead"])] == min(dsi["predicted_ms"].values())
    assert si["lookahead"] >= 1
    assert main(["plan", "--target-per-token", "3", "-a", "0.8", "--sp-degree", "4", "-N", "40"]) == 0
    text = capsys.readouterr().out
    assert "virtual clock" in text and "chosen" in text and "DSI / SI" in text


@pytest.mark.slow
def test_under_load_every_policy_per_rate_and_the_plot(capsys, tmp_path):
    """--load: one row per rate and policy, the adaptive policy at least the best fixed one's throughput."""
    png = tmp_path / "load.png"
    argv = [
        "simulate",
        "load",
        "--json",
        "-N",
        "20",
        "--units",
        "4",
        "--load",
        "0.5x,2x",
        "--requests",
        "12",
        "-k",
        "3",
    ]
    assert main([*argv, "-o", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["results"]
    assert [(r["load_x_nonsi_capacity"], r["policy"]) for r in rows] == [
        (x, p) for x in (0.5, 2.0) for p in ("adaptive", "dsi", "si", "nonsi")
    ]
    for x in (0.5, 2.0):
        thr = {r["policy"]: r["throughput_tokens_per_s"] for r in rows if r["load_x_nonsi_capacity"] == x}
        assert thr["adaptive"] >= max(thr["dsi"], thr["si"], thr["nonsi"]) * 0.99
    assert all(r["requests"] == 12 and r["latency_p50_ms"] <= r["latency_p99_ms"] for r in rows)
    assert png.stat().st_size > 10_000
    assert (
        main(
            ["simulate", "load", "-N", "10", "--units", "2", "--clients", "1,3", "--requests", "6", "--policies", "si"]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "1 clients" in text and "3 clients" in text and "tokens/s" in text


@pytest.mark.slow
def test_under_load_refuses_bad_flags():
    from cli_check import assert_one_line_error, run_cli

    r = run_cli("simulate", "load", "--load", "1x", "--clients", "2")
    assert_one_line_error(r.returncode, r.stderr, "either --load or --clients")
    r = run_cli("simulate", "load", "--load", "-1")
    assert_one_line_error(r.returncode, r.stderr, "--load")
    r = run_cli("simulate", "load", "--load", "1", "--policies", "fastest")
    assert_one_line_error(r.returncode, r.stderr, "--policies")
