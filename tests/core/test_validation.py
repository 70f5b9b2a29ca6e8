"""Bad input gets a clear error naming the problem (never a hang or a deep traceback)."""

import pytest

from conftest import make_pair
from specpar import ConfigError, LatencyProfile, SimulatedModel, SpecparWarning, generate
from specpar.entrypoints.cli import main


@pytest.fixture
def pair():
    return make_pair()


@pytest.mark.parametrize("algo", ["nonsi", "si", "dsi"])
def test_empty_prompt(pair, algo):
    with pytest.raises(ConfigError, match="prompt is empty"):
        generate([], *pair, algorithm=algo)


@pytest.mark.parametrize("n", [0, -3, 2.5])
def test_non_positive_n(pair, n):
    with pytest.raises(ConfigError, match="max_new_tokens"):
        generate([1], *pair, max_tokens=n)


@pytest.mark.parametrize("algo", ["si", "dsi"])
@pytest.mark.parametrize("k", [0, -1])
def test_non_positive_lookahead(pair, algo, k):
    with pytest.raises(ConfigError, match="lookahead"):
        generate([1], *pair, algorithm=algo, lookahead=k)


@pytest.mark.parametrize("sp", [0, -2, 1.5])
def test_sp_degree_below_one(pair, sp):
    with pytest.raises(ConfigError, match="sp_degree"):
        generate([1], *pair, sp_degree=sp)


@pytest.mark.parametrize("a", [-0.01, 1.01, float("nan")])
def test_acceptance_rate_outside_unit_interval(a):
    with pytest.raises(ConfigError, match="acceptance_rate"):
        SimulatedModel(8).drafter(a)


@pytest.mark.parametrize("field", ["ttft_ms", "tpot_ms", "per_token_ms"])
def test_negative_latencies(field):
    kw = {"ttft_ms": 1.0, "tpot_ms": 1.0, "per_token_ms": 0.0, field: -1.0}
    with pytest.raises(ConfigError, match=field):
        LatencyProfile(**kw)


def test_drafter_slower_than_target_warns_about_assumption_2_and_stays_lossless():
    target = SimulatedModel(8, latency=LatencyProfile.uniform(1.0))
    drafter = target.drafter(0.9, LatencyProfile.uniform(2.0))
    with pytest.warns(SpecparWarning, match="Assumption 2"):
        out = generate([1], target, drafter, algorithm="dsi", max_tokens=20, lookahead=2)
    assert out.tokens == target.greedy_tokens([1], 20)


def test_unknown_algorithm_runtime_and_missing_drafter(pair):
    with pytest.raises(ConfigError, match="algorithm"):
        generate([1], *pair, algorithm="medusa")
    with pytest.raises(ConfigError, match="runtime"):
        generate([1], *pair, runtime="gpu")
    with pytest.raises(ConfigError, match="needs a drafter"):
        generate([1], pair[0], None, algorithm="si")
    with pytest.raises(ConfigError, match="temperature"):
        generate([1], *pair, temperature=-1)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["-a", "1.5"], "acceptance rate a must be in [0, 1]"),
        (["-N", "0"], "--max-tokens"),
        (["-k", "0"], "--lookahead must be an integer >= 1, 'auto' or 'adaptive'"),
        (["-k", "many"], "--lookahead must be an integer >= 1, 'auto' or 'adaptive'"),
        (["--sp-degree", "0"], "--sp-degree must be >= 1"),
        (["--target-tpot", "-5"], "--target-tpot must be a latency in [0, 1e+09] ms"),
        (["-c", "0"], "zero latency"),
        (["hsd", "--repeats", "0"], "--repeats must be >= 1"),
    ],
)
def test_cli_reports_bad_input_in_one_line(capsys, argv, needle):
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
