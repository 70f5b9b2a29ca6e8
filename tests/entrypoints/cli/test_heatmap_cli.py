"""``specpar heatmap``: PNG and CSV files, the CSV's contents, clear errors for bad options."""

import csv

import pytest

from specpar.entrypoints.cli import main


@pytest.mark.slow
def test_heatmap_writes_png_and_csv(tmp_path, capsys):
    prefix = str(tmp_path / "fig2")
    assert main(["heatmap", "--resolution", "4", "-N", "20", "--repeats", "2", "-o", prefix]) == 0
    assert (tmp_path / "fig2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(prefix + ".csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 * 5
    assert {r["drafter_latency"] for r in rows} == {"0.01", "0.34", "0.67", "1"}
    for r in rows:
        assert float(r["nonsi"]) == 20
        assert float(r["dsi_vs_nonsi"]) >= 1 - 1e-9  # Theorem 1 in every cell
        assert float(r["si_vs_nonsi"]) == pytest.approx(float(r["nonsi"]) / float(r["si"]), rel=1e-5)
        assert 1 <= int(r["si_lookahead"]) <= 200
    assert "(d) DSI vs the faster of SI and non-SI" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("given", ["fig.png", "fig.csv", "fig.PNG"])
def test_an_output_named_with_its_extension_is_not_doubled(tmp_path, given, capsys):
    """-o fig.png wrote fig.png.png and fig.png.csv (and a missing directory was reported as 'fig.png.png')."""
    assert main(["heatmap", "--resolution", "2", "-N", "5", "--repeats", "1", "-o", str(tmp_path / given)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.csv", "fig.png"]
    assert main(["heatmap", "--resolution", "2", "-o", str(tmp_path / "missing" / given)]) == 2
    assert "fig.png'" in capsys.readouterr().err


@pytest.mark.slow
def test_fixed_lookahead_reports_where_eq1_fails(tmp_path, capsys):
    prefix = str(tmp_path / "fig7")
    assert main(["heatmap", "--resolution", "3", "-N", "20", "--repeats", "2", "-k", "5", "-o", prefix]) == 0
    with open(prefix + ".csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["si_lookahead"] for r in rows} == {"5"} and {r["dsi_lookahead"] for r in rows} == {"5"}
    assert {r["eq1_satisfied"] for r in rows if r["drafter_latency"] == "0.01"} == {"0"}  # 1 / (5 * 0.01) > 7
    assert "Eq. 1 fails" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args,words",
    [
        (["--resolution", "1"], "resolution must be an integer in [2, 1000]"),
        (["--repeats", "0"], "repeats must be a positive integer"),
        (["--lookaheads", "5-2"], "ranges FIRST-LAST"),
        (["--lookaheads", "1,5"], "--lookaheads is a range FIRST-LAST here"),
        (["-k", "0"], "lookahead must be a positive integer"),
    ],
)
def test_bad_options_get_clear_errors(tmp_path, capsys, args, words):
    assert main(["heatmap", "-o", str(tmp_path / "x"), *args]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.slow
def test_check_cells_prints_event_simulator_beside_fast_path(tmp_path, capsys):
    n = 10
    assert (
        main(
            [
                "heatmap",
                "--resolution",
                "2",
                "-N",
                str(n),
                "--repeats",
                "2",
                "--check-cells",
                "6",
                "-o",
                str(tmp_path / "x"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "fast path vs event-driven simulator" in out and "DSI events" in out
    rows = [
        [float(x) for x in line.strip("│ ").split("│")]
        for line in out.splitlines()
        if line.startswith("│") and line.count("│") == 9
    ]
    assert len(rows) == 6
    for c, _a, k_si, _, si_fast, si_events, dsi_fast, dsi_events in rows:
        for si in (si_fast, si_events):  # at least one round per k + 1 tokens, at most one token per round
            assert n / (k_si + 1) <= si <= n * (1 + k_si * c) + 1e-9
        assert 0 < dsi_fast <= n + 1e-9 and 0 < dsi_events <= n + 1e-9  # Theorem 1: never slower than non-SI
    exact = [r for r in rows if r[1] in (0.0, 1.0)]  # acceptance certain: both simulators must agree exactly
    assert exact and all(r[4] == r[5] and r[6] == r[7] for r in exact)


@pytest.mark.slow
def test_every_panel_of_a_figure_shares_one_colour_scale(tmp_path, monkeypatch):
    """The same colour means the same speedup in every panel (issue 14): one norm, sized by the widest panel."""
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    assert main(["heatmap", "--resolution", "4", "-N", "20", "--repeats", "1", "-o", str(tmp_path / "f")]) == 0
    images = [ax.images[0] for ax in figures[0].axes if ax.images]
    assert len(images) == 5  # (a), (b) under the authors' protocol, (b') stricter, (c), (d)
    assert len({(im.norm.vmin, im.norm.vmax) for im in images}) == 1
    widest = max(float(abs(im.get_array()).max()) for im in images)
    assert images[0].norm.vmax == pytest.approx(min(max(widest, 0.1), 2.0))
