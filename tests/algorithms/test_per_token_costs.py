"""DSI on real cost models: a verification that costs more per token fed (per_token_ms), a costly prefill (TTFT),
replicas that must catch up; the dedicated pass on the cursor keeps DSI never slower than non-SI per run."""

import itertools
import json

import pytest

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.entrypoints.cli import main
from specpar.planning import min_lookahead, sp_degree_needed
from specpar.prediction.lookahead_choice import choose_lookahead


def run_pair(seed, a, c, ttft, per_token, n, **kw):
    target = SimulatedModel(8, seed=seed, latency=LatencyProfile(ttft, 1.0, per_token))
    drafter = target.drafter(a, LatencyProfile(ttft * c, c), seed=seed + 5)
    prompt = [seed % 8, 3]  # ids in the vocabulary of 8
    nonsi = generate(prompt, target, algorithm="nonsi", max_tokens=n, **kw)
    return target, drafter, prompt, nonsi


@pytest.mark.slow
def test_theorem1_per_run_on_a_grid_of_per_token_costs_and_prefills():
    """per_token_ms in {0, 0.05, 0.2, 0.6} x TPOT, TTFT in {1, 3, 10} x TPOT, several c, a, k and SP: DSI never
    slower than non-SI on any run (virtual clock), and the target's own tokens."""
    n, runs = 40, 0
    for per_token, ttft in itertools.product((0.0, 0.05, 0.2, 0.6), (1.0, 3.0, 10.0)):
        for c, a, k, sp in itertools.product((0.05, 0.3), (0.0, 0.6, 1.0), (1, 4), (2, 5)):
            target, drafter, prompt, nonsi = run_pair(k + sp, a, c, ttft, per_token, n)
            dsi = generate(prompt, target, drafter, algorithm="dsi", max_tokens=n, lookahead=k, sp_degree=sp)
            assert dsi.tokens == nonsi.tokens
            assert dsi.time_ms <= nonsi.time_ms + 1e-9, (per_token, ttft, c, a, k, sp)
            runs += 1
    assert runs == 12 * 24


def test_without_a_dedicated_cursor_pass_dsi_loses_on_per_token_costs():
    """The negative control: verifications standing in for the pass on the cursor (the paper's rule, exact when a
    pass costs the same whatever it is fed) make DSI slower than non-SI here."""
    lost = 0
    for a, c in itertools.product((0.3, 0.6), (0.05, 0.1)):
        target, drafter, prompt, nonsi = run_pair(1, a, c, 1.0, 0.6, 40)
        dsi = generate(
            prompt,
            target,
            drafter,
            algorithm="dsi",
            max_tokens=40,
            lookahead=8,
            sp_degree=6,
            dedicated_cursor=False,
        )
        lost += dsi.time_ms > nonsi.time_ms + 1e-9
    assert lost >= 3


@pytest.mark.parametrize("per_token", [0.0, 0.3])
def test_theorem1_on_threads_with_per_token_costs(per_token, no_thread_leak):
    for seed, a in ((0, 0.0), (1, 0.7)):
        target, drafter, prompt, _ = run_pair(seed, a, 0.1, 1.0, per_token, 12)
        # ms: long enough that the threads' hand-offs (a few ms on a loaded 2-core machine) stay small beside a pass
        target.latency = LatencyProfile(12.0, 12.0, 12.0 * per_token)
        drafter.latency = LatencyProfile(1.2, 1.2)
        nonsi_ms, dsi_ms = [], []
        for _ in range(3):  # interleaved; a loaded machine only adds time, so the fastest of each arm is compared
            nonsi = generate(prompt, target, algorithm="nonsi", max_tokens=12, runtime="threads")
            dsi = generate(
                prompt, target, drafter, algorithm="dsi", max_tokens=12, lookahead=3, sp_degree=4, runtime="threads"
            )
            assert dsi.tokens == nonsi.tokens
            nonsi_ms.append(nonsi.time_ms)
            dsi_ms.append(dsi.time_ms)
        assert min(dsi_ms) <= min(nonsi_ms) * 1.15 + 2.0  # wall clock: thread hand-offs and scheduling noise


@pytest.mark.slow
def test_the_issue_repro_no_longer_loses(tmp_path, capsys):
    """a = 0, a pass costs 30 ms + 3 ms per extra token, drafter 12 ms, SP 7: DSI was 0.66x non-SI."""
    profile = tmp_path / "p.json"
    profile.write_text(
        json.dumps(
            {
                "target": {"ttft_ms": 30, "tpot_ms": 30, "per_token_ms": 3},
                "drafter": {"ttft_ms": 12, "tpot_ms": 12},
                "acceptance_rate": 0.0,
            }
        )
    )
    assert (
        main(["simulate", "--profile", str(profile), "--sp-degree", "7", "-N", "100", "--repeats", "3", "--json"]) == 0
    )
    res = json.loads(capsys.readouterr().out)["results"]
    assert res["dsi"]["speedup_vs_nonsi"] >= 1.0 - 1e-9
    assert res["dsi"]["same_tokens_as_nonsi"]


def test_on_eq1s_servers_a_short_last_chunk_waits_behind_the_pass_on_the_cursor():
    """c = 0.01, a = 1, k = 15: Eq. 1 says 7 servers (the planner's count: it adds none for this end effect); with 7
    the short last chunk queues behind the cursor's pass, 0.5% of the generation's time."""
    assert sp_degree_needed(1.0, 0.01, 15) == 7
    times = {}
    for sp in (7, 8):
        target = SimulatedModel(8, seed=0, latency=LatencyProfile.uniform(1.0))
        drafter = target.drafter(1.0, LatencyProfile.uniform(0.01), seed=3)
        times[sp] = generate([1], target, drafter, algorithm="dsi", max_tokens=100, lookahead=15, sp_degree=sp)
    assert times[8].time_ms == pytest.approx(1.99) and times[7].time_ms == pytest.approx(2.0)


@pytest.mark.slow
@pytest.mark.parametrize("c", [0.02, 0.1, 0.4])
@pytest.mark.parametrize("a", [0.3, 0.8, 0.95])
def test_lookahead_auto_is_never_slower_than_the_smallest_valid_lookahead(c, a):
    """Mean over repeats, on draws the choice did not see."""
    target_lat, drafter_lat = LatencyProfile.uniform(1.0), LatencyProfile.uniform(c)
    choice = choose_lookahead(target_lat, drafter_lat, a, 7, 100, seed=0)
    smallest = min_lookahead(1.0, c, 7)
    assert choice.lookahead in choice.valid and smallest == choice.smallest_valid
    total = {"auto": 0.0, "smallest": 0.0}
    for seed in range(100, 140):
        target = SimulatedModel(8, seed=seed, latency=target_lat)
        drafter = target.drafter(a, drafter_lat, seed=seed + 1)
        for name, k in (("auto", choice.lookahead), ("smallest", smallest)):
            total[name] += generate(
                [1], target, drafter, algorithm="dsi", max_tokens=100, lookahead=k, sp_degree=7
            ).time_ms
    assert total["auto"] <= total["smallest"] * 1.01


@pytest.mark.slow
def test_lookahead_auto_on_a_per_token_profile_uses_the_virtual_clock_and_wins():
    target_lat, drafter_lat = LatencyProfile(30.0, 30.0, 1.0), LatencyProfile(3.0, 3.0)
    choice = choose_lookahead(target_lat, drafter_lat, 0.8, 4, 60)
    assert choice.method == "virtual clock" and choice.valid == list(range(choice.smallest_valid, 33))
    assert choice.predicted_ms[choice.lookahead] == min(choice.predicted_ms.values())
    total = {}
    for k in {choice.lookahead, choice.smallest_valid}:
        total[k] = 0.0
        for seed in range(50, 60):
            target = SimulatedModel(8, seed=seed, latency=target_lat)
            drafter = target.drafter(0.8, drafter_lat, seed=seed + 1)
            total[k] += generate([2], target, drafter, algorithm="dsi", max_tokens=60, lookahead=k, sp_degree=4).time_ms
    assert total[choice.lookahead] <= total[choice.smallest_valid] * 1.01


@pytest.mark.slow
def test_lookahead_auto_without_a_valid_lookahead_tries_them_all():
    """Reading a token costs more than drafting it: no SP keeps up (Eq. 1 cannot hold); the fastest is chosen."""
    choice = choose_lookahead(LatencyProfile(30.0, 30.0, 6.0), LatencyProfile(3.0, 3.0), 0.8, 4, 40)
    assert choice.valid == [] and sorted(choice.predicted_ms) == list(range(1, 33))
    assert "no lookahead satisfies Eq. 1" in choice.why


@pytest.mark.slow
def test_generate_takes_lookahead_auto_for_simulated_models_and_refuses_it_without_an_acceptance_rate():
    from specpar import ConfigError
    from specpar.backends import SimulatedModel as Model

    target = Model(8, seed=2, latency=LatencyProfile(20.0, 20.0, 2.0))
    drafter = target.drafter(0.9, LatencyProfile.uniform(2.0), seed=3)
    out = generate([1, 2], target, drafter, algorithm="dsi", max_tokens=50, lookahead="auto", sp_degree=4)
    expected = choose_lookahead(target.latency, drafter.latency, 0.9, 4, 50).lookahead
    assert out.lookahead == expected and out.tokens == target.greedy_tokens([1, 2], 50)

    class Unknown:  # a drafter with a latency but no known acceptance rate
        latency = drafter.latency

        def server(self, name):
            return drafter.server(name)

    with pytest.raises(ConfigError, match='lookahead="auto" needs'):
        generate([1], target, Unknown(), algorithm="si", max_tokens=5, lookahead="auto")
