"""Logits processors keep speculative inference lossless: the output is the *processed* target's.

Sampling: the joint law of the first tokens is the processed target's exact law (chi-square), for top-k,
top-p and the repetition penalty, on non-SI, SI and DSI; two biased variants (no processor, or every row
penalized with the first row's prefix instead of its own) must fail the same test. Greedy: token-equal to
the processed target's own greedy decoding, on simulated and tiny transformers models (whose reference is
transformers' ``generate``).
"""

import itertools
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

import specpar.backends.simulated as simulated
import specpar.core.logits_processors as lp
from specpar import Engine, LatencyProfile, SamplingParams, SimulatedModel
from stats import chi_square_p_value
from tiny_transformers import tiny_pair

V, N, PROMPT, SAMPLES = 4, 3, [0], 1500
LOOKAHEAD = {"nonsi": None, "si": 2, "dsi": 1}  # DSI's second token is judged by the previous task's extra row
PARAMS = {
    "top_k": dict(top_k=2),
    "top_p": dict(top_p=0.75),
    "repetition_penalty": dict(repetition_penalty=4.0),
}


def target_model():
    return SimulatedModel(V, seed=21, latency=LatencyProfile.uniform(1.0), spread=1.5)


def exact_joint(target, params: SamplingParams):
    """The processed target's law of the first N tokens, from the definition (logits -> processors -> softmax)."""
    proc = params.processors

    def prob(seq):
        out, p = list(PROMPT), 1.0
        for t in seq:
            z = proc.apply(target.logits(target.prefix_hash(out))[None], out, len(out), params.temperature)
            p *= float(lp.softmax(z)[0, t])
            out.append(t)
        return p

    return {seq: prob(seq) for seq in itertools.product(range(V), repeat=N)}


def sample_outputs(engine, algorithm, params):
    return Counter(
        tuple(
            engine.generate(PROMPT, replace(params, seed=i), algorithm=algorithm, lookahead=LOOKAHEAD[algorithm]).tokens
        )
        for i in range(SAMPLES)
    )


def engine_for(target, drafter_name):
    lat = LatencyProfile.uniform(0.1)
    drafter = {"mixed": target.drafter(0.5, lat, seed=4), "other-model": SimulatedModel(V, seed=99, latency=lat)}
    return Engine(target, drafter[drafter_name], sp_degree=3)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PARAMS))
@pytest.mark.parametrize("algorithm", ["nonsi", "si", "dsi"])
def test_sampled_output_follows_the_processed_target(algorithm, name):
    target = target_model()
    params = SamplingParams(temperature=0.9, max_tokens=N, **PARAMS[name])
    drafter = "other-model" if name == "repetition_penalty" else "mixed"
    p_value = chi_square_p_value(
        sample_outputs(engine_for(target, drafter), algorithm, params), exact_joint(target, params)
    )
    assert p_value > 1e-3, f"{algorithm} with {name} does not follow the processed target (p = {p_value:.2g})"


def skip_processors(rows):
    return lambda logits, context, start, decoding: rows(logits, context, start, replace(decoding, processors=None))


def first_rows_prefix(penalize):
    def stale(z, context, start, penalty):  # every row penalized as if it were the first one
        for i in range(len(z)):
            penalize(z[i : i + 1], context, start, penalty)

    return stale


@pytest.mark.slow
@pytest.mark.parametrize("bias", ["no processor", "first row's prefix"])
@pytest.mark.parametrize("algorithm", ["si", "dsi"])
def test_a_biased_processing_fails_the_distribution_test(monkeypatch, algorithm, bias):
    if bias == "no processor":
        monkeypatch.setattr(simulated, "rows", skip_processors(lp.rows))
    else:
        monkeypatch.setattr(lp, "penalize_repeats", first_rows_prefix(lp.penalize_repeats))
    target = target_model()
    params = SamplingParams(temperature=0.9, max_tokens=N, repetition_penalty=4.0)
    p_value = chi_square_p_value(
        sample_outputs(engine_for(target, "other-model"), algorithm, params), exact_joint(target, params)
    )
    assert p_value < 1e-6, f"the test could not detect the {bias} bias (p = {p_value:.2g})"


@pytest.mark.slow
def test_a_drafter_left_unprocessed_costs_acceptance_not_exactness(monkeypatch):
    """Speculative sampling is lossless for any q it is told: a drafter whose rows skip the processors (and
    that reports those rows) still gives the processed target's law; what processing the drafter buys is
    acceptance. (A biased variant has to break the target's rows or the q reported, as the test above does.)"""
    target = target_model()
    params = SamplingParams(temperature=0.9, max_tokens=N, top_k=2)
    engine = engine_for(target, "other-model")
    drafter = engine.drafters.servers[0].model
    raw = drafter.processed_rows
    monkeypatch.setattr(drafter, "processed_rows", lambda h, c, s, d: raw(h, c, s, replace(d, processors=None)))
    p_value = chi_square_p_value(sample_outputs(engine, "si", params), exact_joint(target, params))
    assert p_value > 1e-3


def processed_greedy(target, prompt, n, params):
    out = list(prompt)
    for _ in range(n):
        z = params.processors.apply(target.logits(target.prefix_hash(out))[None], out, len(out), 0.0)
        out.append(int(z[0].argmax()))
    return out[len(prompt) :]


@pytest.mark.parametrize("algorithm", ["nonsi", "si", "dsi", "hsd"])
def test_greedy_with_a_penalty_is_the_processed_targets_greedy_on_simulated_models(algorithm):
    target = SimulatedModel(6, seed=3, spread=1.0)  # flat logits: the penalty changes many argmaxes
    drafter = target.drafter(0.7, seed=2)
    params = SamplingParams(temperature=0, max_tokens=40, repetition_penalty=1.6, top_k=2, top_p=0.5, min_p=0.3)
    want = processed_greedy(target, [1, 2], 40, params)
    assert want != target.greedy_tokens([1, 2], 40)  # the penalty matters here
    with Engine(target, [drafter] if algorithm == "hsd" else drafter, sp_degree=3) as engine:
        for k in (1, 3):
            assert engine.generate([1, 2], params, algorithm=algorithm, lookahead=k).tokens == want


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=64, seed=3, noise=0.5)


@pytest.mark.parametrize("algorithm", ["nonsi", "si", "dsi"])
def test_greedy_with_each_param_on_tiny_transformers_is_transformers_own(pair, algorithm):
    target, drafter = pair
    module = target.module_on("cpu")
    prompt = [5, 9, 5, 2]
    with Engine(target, drafter, sp_degree=2) as engine:
        for kw in ({"repetition_penalty": 1.8}, {"repetition_penalty": 0.8}, {"top_k": 2, "top_p": 0.3, "min_p": 0.5}):
            with torch.no_grad():
                ref = module.generate(
                    torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False, eos_token_id=None,
                    pad_token_id=0, repetition_penalty=kw.get("repetition_penalty", 1.0),
                )[0, len(prompt) :].tolist()  # fmt: skip
            got = engine.generate(prompt, algorithm=algorithm, lookahead=3, max_tokens=12, **kw, temperature=0).tokens
            assert got == ref, f"{algorithm} {kw}"


@pytest.mark.parametrize("algorithm", ["si", "dsi"])
def test_sampled_tokens_on_tiny_transformers_stay_in_the_processed_support(pair, algorithm):
    """top_k=3 of 64: every output token is among the target's 3 most likely at its own prefix."""
    target, drafter = pair
    module = target.module_on("cpu")
    with Engine(target, drafter, sp_degree=2) as engine:
        for seed in range(3):
            prompt = [7, seed + 1]
            out = engine.generate(
                prompt, algorithm=algorithm, lookahead=3, max_tokens=10, temperature=1.5, top_k=3, seed=seed
            )
            seq = prompt + out.tokens
            with torch.no_grad():
                logits = module(torch.tensor([seq])).logits[0].numpy()
            for i in range(len(prompt), len(seq)):
                assert seq[i] in np.argsort(logits[i - 1])[-3:], f"token {i} outside the top 3"
