"""Measuring a pair (prediction/measure.py, measure_pair.py): on simulated models, whose costs are known, every
figure comes out exactly; greedy SI's walk over the drafter's hits is the algorithm's own count; the n-gram rates."""

from __future__ import annotations

import pytest

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.core.latency import LatencyProfile as Linear
from specpar.prediction import measure
from specpar.prediction.machine import FORMAT, MachineProfile
from specpar.prediction.measure_pair import MeasureOptions, measure_pair

PROMPTS = [[1, 2, 3, 4, 5], [3, 1, 4, 1, 5, 9, 2, 6]]
VIRTUAL = MeasureOptions(tokens=24, max_pass=8, repeats=2, runtime="virtual", overheads=())


class TableLatency:
    """A latency model that is not linear in the tokens of a pass: v(k) from a table, the prefill from the prompt's
    length (what a CPU's measured costs look like), priced as the simulated servers ask (``call_ms``)."""

    cache_matters = True

    def __init__(self, v: tuple[float, ...], prefill_per_token: float):
        self.v, self.per_token = v, prefill_per_token

    def pass_ms(self, k: int) -> float:
        return self.v[min(k, len(self.v)) - 1]

    def call_ms(self, call, cached: int) -> float:
        if cached == 0:
            ms = self.per_token * len(call.context)
        else:
            ms = self.pass_ms(max(1, len(call.context) - cached))
        return ms + (call.k - 1) * self.v[0] if call.kind == "draft" else ms


def pair(target_latency, drafter_latency, acceptance=0.8):
    target = SimulatedModel(32, seed=0, latency=target_latency)
    return target, target.drafter(acceptance, drafter_latency, seed=1)


def test_a_simulated_pair_measures_to_its_known_costs_exactly():
    target, drafter = pair(Linear(40.0, 10.0, 2.0), Linear(8.0, 3.0, 0.5))
    labels = []
    fig = measure_pair(target, drafter, PROMPTS, VIRTUAL, labels.append)
    assert [label for label, _ in fig.meta["step_seconds"]] == labels and len(labels) == VIRTUAL.steps(2, 2)
    for n_threads in (1, 2):
        assert fig.passes["target"][n_threads] == tuple(10.0 + 2.0 * (k - 1) for k in range(1, 9))
        assert fig.passes["drafter"][n_threads] == tuple(3.0 + 0.5 * (k - 1) for k in range(1, 9))
        assert {ms for _, ms in fig.prefill["target"][n_threads]} == {40.0}  # a cold pass: ttft
    assert set(fig.steps["target"]) == {10.0} and fig.app_f["drafter"]["tpot_ms"] == 3.0
    assert fig.contention == (1.0, 1.0, 1.0) and fig.outside_ms == 0.0 and fig.per_token_ms == 0.0
    app_f = fig.app_f
    assert (app_f["target"]["ttft_ms"], app_f["target"]["tpot_ms"], app_f["target"]["per_token_ms"]) == (40, 10, 2)
    profile = MachineProfile.from_dict({"format": FORMAT, **fig.profile_fields({"what": "test"})})
    assert profile.target.pass_cost(5, 1) == 18.0 and profile.drafter.prefill(100, 2) == 8.0


def test_a_nonlinear_cost_is_measured_as_it_is_and_a_linear_fit_of_it_misses():
    v = (10.0, 18.0, 21.0, 30.0, 31.0, 32.0, 45.0, 46.0)  # the steps a CPU's kernels take, not a line
    target, drafter = pair(TableLatency(v, 2.0), TableLatency(tuple(x / 4 for x in v), 0.5))
    fig = measure_pair(target, drafter, PROMPTS, VIRTUAL)
    assert fig.passes["target"][1] == v
    lengths = [n for n, _ in fig.prefill["target"][1]]
    assert fig.prefill["target"][1] == [(n, 2.0 * n) for n in lengths] and len(lengths) >= 1
    # the control: App. F's linear summary of the same measurements (tpot + per_token_ms (k - 1)) misses v(k)
    f1 = fig.app_f["target"]
    linear = [f1["tpot_ms"] + f1["per_token_ms"] * (k - 1) for k in range(1, 9)]
    assert max(abs(a - b) / b for a, b in zip(linear, v)) > 0.2


def test_greedy_si_walk_over_the_drafter_hits_counts_what_si_accepts():
    target, drafter = pair(LatencyProfile.uniform(10.0), LatencyProfile.uniform(1.0), acceptance=0.7)
    prompt, n = [5, 6, 7], 60
    out = target.greedy_tokens(prompt, n)
    server = drafter.server("hits")
    _, hits = measure.drafter_hits(server, prompt, out, "virtual")
    assert 0.5 < sum(hits) / n < 0.9
    for k in (1, 3, 5):
        result = generate(prompt, target, drafter, algorithm="si", lookahead=k, max_tokens=n)
        walked = measure.walk(hits, k)
        assert walked["accepted"] == result.accepted and walked["steps"] == result.verifications
    assert measure.walk([True] * 10, 4) == {"steps": 2, "accepted": 8, "tested": 8, "acceptance_rate": 1.0}
    assert measure.walk([False] * 3, 4)["acceptance_rate"] == 0.0


def test_ngram_rates_follow_the_lookups_of_a_repeating_output():
    prompt = [1, 2, 3, 4, 1, 2]
    rates = measure.ngram_rates(prompt, [3, 4, 1, 2, 9, 9], lookahead=3, min_n=1, max_n=2)
    # step 1 at "1 2": drafts 3 4 1, all accepted, the target adds 2; step 2 at "... 1 2": room for one draft and
    # the target's token: 3, rejected (9); step 3: no room left for a draft (no lookup)
    assert (rates["steps"], rates["lookups"], rates["accepted"], rates["drafted"], rates["tested"]) == (3, 2, 3, 4, 4)
    assert rates["match_rate"] == 1.0 and rates["acceptance_rate"] == pytest.approx(3 / 4)
    unmatched = measure.ngram_rates([1, 2, 3], [4, 5, 6, 7], lookahead=2)
    assert unmatched["match_rate"] == 0.0 and unmatched["lookups"] == 3 and unmatched["drafted"] == 0
    repeating = measure.ngram_rates([7, 8, 9] * 4, [7, 8, 9] * 4, lookahead=4)
    assert repeating["acceptance_rate"] == 1.0 and repeating["match_rate"] == 1.0


def test_the_threads_runtime_overhead_per_call_is_measured_and_small():
    ms = measure.call_overhead_ms("threads", calls=50)
    assert 0.0 < ms < 20.0  # tens of microseconds on an idle machine; generous for a loaded one


def test_options_are_checked_before_any_measurement():
    with pytest.raises(ValueError, match="must exceed the longest pass"):
        MeasureOptions(tokens=8, max_pass=8)
    with pytest.raises(ValueError, match="must cover a verification"):
        MeasureOptions(max_pass=4, lookahead=4)
    with pytest.raises(ValueError, match="repeats >= 1"):
        MeasureOptions(repeats=0)


@pytest.mark.slow  # llama.cpp
def test_a_prefill_is_measured_in_the_passes_a_request_feeds(tmp_path, monkeypatch):
    """llama.cpp's exact mode prefills a request's prompt in canonical passes (512 tokens; prefill.py): a measured
    prefill, the sample's decodings and the drafter's hits feed the passes a request of that prompt feeds. The
    control: the call without the prompt's length (the measurement before) feeds exact passes of at most 7."""
    pytest.importorskip("llama_cpp")
    from specpar.backends.llama.context import LlamaContext
    from specpar.backends.llama.model import LlamaModel
    from specpar.core.calls import Score
    from specpar.core.decoding import GREEDY
    from specpar.experiments.runs import run_once
    from tiny_gguf import write_tiny_gguf

    model = LlamaModel(write_tiny_gguf(tmp_path / "tiny.gguf"), name="tiny")
    fed, decode = [], LlamaContext.decode

    def spy(self, tokens, positions, rows, seqs=None, cancelled=None, passes=None):
        fed.append(list(passes or (len(tokens),)))
        return decode(self, tokens, positions, rows, seqs, cancelled, passes)

    monkeypatch.setattr(LlamaContext, "decode", spy)
    prompt = [(7 * i) % 250 + 3 for i in range(40)]
    run_once(prompt, model, max_tokens=2, algorithm="nonsi", runtime="threads")
    requested = fed[0]
    assert requested == [39, 1]  # the prompt but its last token in one canonical pass, then that token
    fed.clear()
    measure.prefill_ms(model, [prompt], "threads", 1)
    assert fed == [requested]
    fed.clear()
    server = model.server("sample")
    try:
        run = measure.greedy_run(model, server, prompt, 3, "threads", 1)
        assert fed[0] == requested and len(fed) == 3  # the prompt's passes, then one-token steps
        fed.clear()
        server.reset()
        measure.drafter_hits(server, prompt, run["tokens"], "threads")
        assert (
            fed[0] == requested and sum(fed[1]) <= len(run["tokens"]) + 1
        )  # the cached prompt reused: its last token and the outputs fed
    finally:
        server.close()
    fed.clear()
    server = model.server("control")  # the control: the measurement's call before, its prompt's length not given
    try:
        with measure.runtime_over([server], "threads") as (rt, pools):
            measure.timed(rt, pools[0], Score(tuple(prompt), 0, GREEDY))
    finally:
        server.close()
    assert fed != [requested] and max(fed[0]) <= model.settings.ubatch < 39
