"""HSD's optimizer: the dynamic program agrees with exhaustive search, never loses to SI, drops useless models."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpar import ConfigError, LatencyProfile
from specpar.backends.stack import SimulatedStack
from specpar.entrypoints.cli import main
from specpar.planning.hsd_latency import hierarchy_latency
from specpar.planning.hsd_optimizer import best_single_drafter, exhaustive, optimize


@st.composite
def instances(draw, max_drafters: int = 4):
    k = draw(st.integers(1, max_drafters))
    costs = sorted(draw(st.lists(st.floats(0.001, 1.0), min_size=k, max_size=k, unique=True)))
    costs.append(draw(st.floats(1.01, 3.0)))
    alpha = draw(
        st.lists(st.lists(st.floats(0.0, 1.0), min_size=k + 1, max_size=k + 1), min_size=k + 1, max_size=k + 1)
    )
    return costs, alpha, draw(st.integers(1, 4))


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(problem=instances())
def test_dynamic_program_agrees_with_exhaustive_search(problem):
    costs, alpha, t_max = problem
    dp, ref = optimize(costs, alpha, t_max), exhaustive(costs, alpha, t_max)
    assert dp.latency == pytest.approx(ref.latency, rel=1e-9)
    assert dp.latency == pytest.approx(hierarchy_latency(costs, alpha, dp.levels, dp.buffers), rel=1e-9)
    assert all(1 <= t <= t_max for t in dp.buffers)


@settings(max_examples=40, deadline=None)
@given(problem=instances(max_drafters=8))
def test_never_worse_than_the_best_single_drafter_or_the_target_alone(problem):
    costs, alpha, _ = problem
    best, single = optimize(costs, alpha, 15), best_single_drafter(costs, alpha, 15)
    assert best.latency <= single.latency * (1 + 1e-12)
    assert best.latency <= costs[-1]


def test_a_useless_model_is_left_out():
    """M1 is cheap but agrees with nobody; M0 and M2 agree well with each other and with the target."""
    costs = [0.01, 0.05, 0.2, 1.0]
    alpha = np.array([[1, 0.01, 0.9, 0.8], [0.01, 1, 0.01, 0.01], [0.9, 0.01, 1, 0.9], [0.8, 0.01, 0.9, 1]])
    plan = optimize(costs, alpha, 15)
    assert 1 not in plan.levels
    assert plan.levels == (0, 2, 3)  # and the other two are both worth keeping
    assert plan.latency < best_single_drafter(costs, alpha, 15).latency


def test_a_hierarchy_beats_every_single_drafter_where_the_paper_says_it_can():
    stack = SimulatedStack([0.7, 0.85, 0.9], [LatencyProfile.uniform(c) for c in (0.2, 1.5, 6.0, 30.0)])
    plan = optimize(stack.costs, stack.alpha, 15)
    assert plan.levels == (0, 1, 2, 3)
    assert best_single_drafter(stack.costs, stack.alpha, 15).latency / plan.latency > 1.2


def test_no_drafter_helps_gives_the_target_alone():
    plan = optimize([0.9, 1.0], [[1, 0.1], [0.1, 1]], 15)
    assert plan.levels == (1,) and plan.buffers == () and plan.latency == 1.0


def test_k80_is_solved_and_agrees_with_its_own_latency_and_beats_every_simpler_plan():
    rng = np.random.default_rng(0)
    costs = list(np.linspace(0.01, 1.0, 81))
    alpha = rng.uniform(0.3, 1.0, (81, 81))
    plan = optimize(costs, alpha, 15)
    assert plan.levels[-1] == 80 and list(plan.levels) == sorted(set(plan.levels))
    assert plan.latency == pytest.approx(hierarchy_latency(costs, alpha, plan.levels, plan.buffers), rel=1e-9)
    assert plan.latency <= best_single_drafter(costs, alpha, 15).latency + 1e-12 < 1.0  # one drafter already helps here


@pytest.mark.parametrize(
    "costs,alpha,t_max,message",
    [
        ([0.1, 1.0], [[1, 1.2], [0.5, 1]], 5, r"alpha\[0\]\[1\] = 1.2 is not an acceptance rate"),
        ([0.1, 1.0], [[1, -0.1], [0.5, 1]], 5, r"alpha\[0\]\[1\] = -0.1"),
        ([0.1, 1.0], [[1, 0.5, 0.2], [0.5, 1, 0.3]], 5, "must be square"),
        ([0.1, 0.5, 1.0], [[1, 0.5], [0.5, 1]], 5, "one row per model"),
        ([0.5, 0.1, 1.0], np.ones((3, 3)), 5, "increase toward the target"),
        ([0.1, 1.0, 1.0], np.ones((3, 3)), 5, "increase toward the target"),
        ([0.1, 1.0], np.ones((2, 2)), 0, "T_max must be an integer >= 1"),
        ([-0.1, 1.0], np.ones((2, 2)), 5, "c_0 must be a finite number > 0"),
    ],
)
def test_bad_input_gets_a_clear_error(costs, alpha, t_max, message):
    with pytest.raises(ConfigError, match=message):
        optimize(costs, alpha, t_max)


def test_stacks_refuse_matrices_they_cannot_realise():
    lats = [LatencyProfile.uniform(c) for c in (0.1, 0.5, 1.0)]
    with pytest.raises(ConfigError, match=r"alpha\[0\]\[2\] = 0.9 but alpha\[0\]\[1\] \* alpha\[1\]\[2\] = 0.64"):
        SimulatedStack.from_matrix([[1, 0.8, 0.9], [0.8, 1, 0.8], [0.9, 0.8, 1]], lats)
    stack = SimulatedStack.from_matrix([[1, 0.8, 0.64], [0.8, 1, 0.8], [0.64, 0.8, 1]], lats)
    assert stack.chain == [0.8, 0.8]
    with pytest.raises(ConfigError, match="vocab_size"):
        SimulatedStack([0.5, 0.5], lats, vocab_size=3)
    with pytest.raises(ConfigError, match="latency profiles"):
        SimulatedStack([0.5], lats)
    with pytest.raises(ConfigError, match=r"alpha\[1\]\[2\]"):
        SimulatedStack([0.5, 1.5], lats)


def test_hsd_plan_command(tmp_path, capsys):
    path = tmp_path / "alpha.txt"
    path.write_text("# pairwise acceptance\n1 0.01 0.9 0.8\n0.01 1 0.01 0.01\n0.9 0.01 1 0.9\n0.8 0.01 0.9 1\n")
    assert main(["hsd-plan", "--costs", "0.01,0.05,0.2,1", "--alpha", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["best"]["levels"] == [0, 2, 3]
    assert report["speedup_vs_best_single_drafter"] > 1 and report["speedup_vs_target"] > 1
    assert main(["hsd-plan", "--costs", "0.01,0.05,0.2,1", "--alpha", str(path)]) == 0
    assert "M0 < M2 < target" in capsys.readouterr().out
    assert main(["hsd-plan", "--costs", "0.01,0.05,1", "--alpha", str(path)]) == 2
    assert "one row per model" in capsys.readouterr().err
    assert main(["hsd-plan", "--costs", "0.01,0.05,0.2,1", "--alpha", str(tmp_path / "missing.json")]) == 2
    assert "alpha file" in capsys.readouterr().err


def test_simulate_hsd_command_runs_the_plan_losslessly(capsys):
    assert main(["simulate", "hsd", "-N", "200", "--repeats", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    hsd = report["results"]["hsd"]
    assert hsd["levels"] == [0, 1, 2, 3] and hsd["same_tokens_as_nonsi"]
    assert hsd["speedup_vs_si"] > 1.05
    assert report["results"]["hsd-sp"]["same_tokens_as_nonsi"] and report["results"]["hsd-sp"]["speedup_vs_si"] > 1.05
    assert main(["simulate", "hsd", "--costs", "1,2,3", "-N", "10"]) == 2
    assert "--alpha FILE or --chain" in capsys.readouterr().err
