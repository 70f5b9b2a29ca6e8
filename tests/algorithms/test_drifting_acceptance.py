"""The simulator's drifting acceptance: a drafter whose rate follows Regimes (e.g. a = 0.9 and 0.4, switching every 50
tokens), deterministic by seed, lossless like any drafter, and reachable from `specpar simulate`."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import numpy as np
import pytest

from specpar import ConfigError, LatencyProfile, SimulatedModel, generate
from specpar.backends import Regimes
from stats import chi_square_p_value

REGIMES = Regimes((0.9, 0.4), 50)


def test_regimes_cycle_in_order_or_draw_by_seed():
    assert [REGIMES.rate_at(p) for p in (0, 49, 50, 99, 100, 151)] == [0.9, 0.9, 0.4, 0.4, 0.9, 0.4]
    assert REGIMES.mean == pytest.approx(0.65)
    drawn = Regimes((0.9, 0.4, 0.1), 10, seed=7)
    spans = [drawn.regime_at(10 * s) for s in range(60)]
    assert spans == [Regimes((0.9, 0.4, 0.1), 10, seed=7).regime_at(10 * s) for s in range(60)]  # by seed
    assert set(spans) == {0, 1, 2} and spans != [s % 3 for s in range(60)]
    assert all(drawn.regime_at(10 * s) == drawn.regime_at(10 * s + 9) for s in range(60))  # constant within a span
    assert Regimes.parse("0.9, 0.4:50").rates == (0.9, 0.4) and Regimes.parse("0.9,0.4:50").every == 50


@pytest.mark.parametrize("bad", ["0.9,0.4", "0.9,x:50", "1.5:50", "0.9:0", ":50"])
def test_bad_regimes_are_a_config_error(bad):
    with pytest.raises(ConfigError, match="regime"):
        Regimes.parse(bad)


def _drafter(seed: int = 1):
    target = SimulatedModel(16, seed=3, latency=LatencyProfile.uniform(1.0))
    return target, target.drafter(REGIMES, LatencyProfile.uniform(0.1), seed=seed)


def test_a_drifting_drafter_agrees_at_each_regimes_rate():
    target, drafter = _drafter()
    hashes = [target.prefix_hash([i, j, k]) for i in range(16) for j in range(16) for k in range(8)]
    for position, a in ((10, 0.9), (60, 0.4), (110, 0.9)):
        greedy = np.mean([drafter.argmax_at(h, position) == target.argmax(h) for h in hashes])
        assert abs(greedy - a) < 0.03
        h = hashes[position]
        overlap = np.minimum(target.probs(h), drafter.probs_at(h, 1.0, position)).sum()
        assert overlap == pytest.approx(a)  # sampling: acceptance exactly a


def _tested_positions(result, prompt_len: int) -> list[tuple[int, bool]]:
    """SI with lookahead 1 tests one draft per round, at the round's cursor: (position, accepted) per round."""
    out, p = [], prompt_len
    for accepted in result.accepted_per_round:
        out.append((p, accepted == 1))
        p += accepted + 1
    return out


def test_a_generation_sees_the_regimes_and_is_deterministic():
    target, drafter = _drafter()
    runs = [generate([1, 2], target, drafter, algorithm="si", lookahead=1, max_tokens=3000) for _ in range(2)]
    assert runs[0].tokens == runs[1].tokens and runs[0].accepted_per_round == runs[1].accepted_per_round
    by_regime: dict[float, list[bool]] = {0.9: [], 0.4: []}
    for position, accepted in _tested_positions(runs[0], 2)[:-1]:  # the last round may have drafted nothing
        by_regime[REGIMES.rate_at(position)].append(accepted)
    assert abs(np.mean(by_regime[0.9]) - 0.9) < 0.03 and abs(np.mean(by_regime[0.4]) - 0.4) < 0.04
    # the control: a drafter at the regimes' mean rate shows no such split
    flat = generate([1, 2], target, target.drafter(0.65, seed=1), algorithm="si", lookahead=1, max_tokens=3000)
    flat_by = {0.9: [], 0.4: []}
    for position, accepted in _tested_positions(flat, 2)[:-1]:
        flat_by[REGIMES.rate_at(position)].append(accepted)
    assert abs(np.mean(flat_by[0.9]) - np.mean(flat_by[0.4])) < 0.08


@pytest.mark.parametrize(
    "algorithm,k,sp,tree",
    [("si", 4, 1, None), ("dsi", 3, 4, None), ("si", None, 1, (2, 1)), ("dsi", None, 3, "best:5")],
)
def test_a_drifting_drafter_keeps_greedy_output_exact(algorithm, k, sp, tree):
    target, drafter = _drafter()
    out = generate([5, 6], target, drafter, algorithm=algorithm, lookahead=k, sp_degree=sp, tree=tree,
                   max_tokens=300)  # fmt: skip
    assert out.tokens == target.greedy_tokens([5, 6], 300)


@pytest.mark.slow
def test_a_drifting_drafter_samples_the_targets_law():
    """Regimes of one token each, so a sampled generation of 3 tokens crosses two switches."""
    target = SimulatedModel(4, seed=21, latency=LatencyProfile.uniform(1.0), spread=1.5)
    drafter = target.drafter(Regimes((0.9, 0.2), 1), LatencyProfile.uniform(0.1), seed=4)
    exact = {s: target.sequence_probability([0, 1], s, 1.0) for s in itertools.product(range(4), repeat=3)}
    counts = Counter(
        tuple(
            generate([0, 1], target, drafter, algorithm="si", lookahead=2, max_tokens=3, temperature=1.0, seed=i).tokens
        )  # fmt: skip
        for i in range(3000)
    )
    assert chi_square_p_value(counts, exact) > 1e-3


def test_specpar_simulate_takes_regimes(capsys):
    from specpar.entrypoints.cli.main import main

    code = main(["simulate", "--acceptance-regimes", "0.9,0.4:50", "-N", "200", "-k", "4", "--repeats", "2", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["acceptance_regimes"] == "0.9,0.4:50" and report["config"]["acceptance_rate"] == 0.65
    si = report["results"]["si"]
    assert 0.55 < si["acceptance_rate"] < 0.8
