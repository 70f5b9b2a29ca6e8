"""Log-probabilities (SamplingParams.logprobs) come from the target's own processed rows: each output token's is the
log-softmax of the processed target logits at its prefix, the same for SI and DSI as for non-SI (the same tokens,
the same rows), with the top tokens in order. A control: a server whose log-probability rows skip the processors
fails the same comparison."""

from dataclasses import replace

import numpy as np
import pytest
import torch

import specpar.backends.simulated as simulated
import specpar.core.logits_processors as lp
from specpar import Engine, SamplingParams, SimulatedModel
from tiny_transformers import tiny_pair

PROMPT = [1, 2]


def definition(logits_at, params: SamplingParams, prompt, tokens):
    """[(token, log-probability)] from the definition: log-softmax of the processed logits (at the temperature)."""
    proc, out, want = params.processors_for(len(prompt)), list(prompt), []
    for t in tokens:
        z = logits_at(out)[None].astype(np.float64)
        z = proc.apply(z, out, len(out), params.temperature) if proc is not None else z
        if params.temperature > 0 and proc is None:
            z = z / params.temperature
        want.append((t, float(lp.log_softmax(z)[0, t])))
        out.append(t)
    return want


CASES = {
    "greedy": dict(temperature=0),
    "greedy, penalized": dict(temperature=0, repetition_penalty=1.5, presence_penalty=0.5),
    "sampled (gumbel)": dict(temperature=0.8, seed=3, coupling="gumbel", top_k=4),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logprobs_on_simulated_models_are_the_processed_targets_for_every_algorithm(case):
    target = SimulatedModel(8, seed=5, spread=1.5)
    params = SamplingParams(max_tokens=25, logprobs=3, **CASES[case])
    with Engine(target, target.drafter(0.6, seed=2), sp_degree=3) as engine:
        base = engine.generate(PROMPT, params, algorithm="nonsi")
        want = definition(lambda out: target.logits(target.prefix_hash(out)), params, PROMPT, base.tokens)
        got = [(x.token, x.logprob) for x in base.logprobs]
        assert [t for t, _ in got] == base.tokens and np.allclose([v for _, v in got], [v for _, v in want])
        for x in base.logprobs:
            assert len(x.top) == 3 and [v for _, v in x.top] == sorted((v for _, v in x.top), reverse=True)
            assert x.logprob <= x.top[0][1] and (params.temperature > 0 or x.top[0] == (x.token, x.logprob))
        for algorithm in ("si", "dsi"):
            for k in (1, 4):
                r = engine.generate(PROMPT, params, algorithm=algorithm, lookahead=k)
                assert r.tokens == base.tokens and r.logprobs == base.logprobs, (algorithm, k)


def test_a_server_whose_logprob_rows_skip_the_processors_is_caught(monkeypatch):
    raw = lp.rows
    monkeypatch.setattr(simulated, "rows", lambda z, c, s, d: raw(z, c, s, replace(d, processors=None)))
    target = SimulatedModel(8, seed=5, spread=1.5)
    params = SamplingParams(max_tokens=25, logprobs=0, temperature=0, repetition_penalty=1.5)
    with Engine(target, target.drafter(0.6, seed=2), sp_degree=3) as engine:
        r = engine.generate(PROMPT, params, algorithm="dsi", lookahead=3)
    want = definition(lambda out: target.logits(target.prefix_hash(out)), params, PROMPT, r.tokens)
    assert not np.allclose([x.logprob for x in r.logprobs], [v for _, v in want])


def test_logprobs_on_tiny_transformers_equal_non_si_and_the_definition():
    target, drafter = tiny_pair(vocab=48, seed=3, noise=0.5)
    module = target.module_on("cpu")

    def logits_at(out):
        with torch.no_grad():
            return module(torch.tensor([out])).logits[0, -1].numpy()

    prompt = [5, 9, 5, 2]
    for kw in (dict(temperature=0), dict(temperature=0, frequency_penalty=0.7)):
        params = SamplingParams(max_tokens=10, logprobs=2, ignore_eos=True, **kw)
        with Engine(target, drafter, sp_degree=2) as engine:
            base = engine.generate(prompt, params, algorithm="nonsi")
            want = definition(logits_at, params, prompt, base.tokens)
            assert np.allclose([x.logprob for x in base.logprobs], [v for _, v in want], atol=1e-9)
            for algorithm in ("si", "dsi"):
                r = engine.generate(prompt, params, algorithm=algorithm, lookahead=3)
                assert r.tokens == base.tokens
                assert np.allclose([x.logprob for x in r.logprobs], [x.logprob for x in base.logprobs], atol=1e-9)


def test_no_logprobs_unless_asked():
    target = SimulatedModel(8, seed=5)
    with Engine(target, target.drafter(0.6)) as engine:
        assert engine.generate(PROMPT, SamplingParams(temperature=0, max_tokens=5)).logprobs is None


@pytest.mark.parametrize("tree", [(2, 2, 1), "best:6"])
def test_logprobs_over_token_trees_equal_non_si(tree):
    target = SimulatedModel(8, seed=5, spread=1.5)
    params = SamplingParams(max_tokens=30, logprobs=2, temperature=0)
    with Engine(target, target.drafter(0.6, seed=2), sp_degree=3) as engine:
        base = engine.generate(PROMPT, params, algorithm="nonsi")
        for algorithm in ("si", "dsi"):
            r = engine.generate(PROMPT, params, algorithm=algorithm, tree=tree)
            assert r.tokens == base.tokens and r.logprobs == base.logprobs, algorithm
