"""The processors that read the output (presence and frequency penalties, min_tokens) and the logit bias keep
speculative inference lossless: the output is the processed target's.

Sampling: the joint law of the first tokens is the processed target's exact law (chi-square) on non-SI, SI and
DSI, and a biased variant of each processor (the prompt counted as output, the bias on the target only, min_tokens
one token short) fails the same test. Greedy: token-equal to the processed target's greedy decoding from the
definition, on simulated models and on tiny transformers models, and different from the unprocessed decoding (so
the processor mattered).
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

V, N, PROMPT, SAMPLES = 4, 3, [0, 1], 1200
LOOKAHEAD = {"nonsi": None, "si": 2, "dsi": 1}
PARAMS = {
    "penalties": dict(presence_penalty=1.5, frequency_penalty=1.0),
    "logit_bias": dict(logit_bias={2: 2.5, 3: -1.0}),
    "min_tokens": dict(min_tokens=2, stop_token_ids=[2]),
}


def target_model():
    return SimulatedModel(V, seed=21, latency=LatencyProfile.uniform(1.0), spread=1.5)


def exact_joint(target, params: SamplingParams):
    """The processed target's law of the first N tokens, from the definition (logits -> processors -> softmax)."""
    proc = params.processors_for(len(PROMPT))

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


def engine_for(target):
    return Engine(target, target.drafter(0.5, LatencyProfile.uniform(0.1), seed=4), sp_degree=3)


def sampled(name: str) -> SamplingParams:
    return SamplingParams(temperature=0.9, max_tokens=N, **PARAMS[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PARAMS))
@pytest.mark.parametrize("algorithm", ["nonsi", "si", "dsi"])
def test_sampled_output_follows_the_processed_target(algorithm, name):
    target = target_model()
    params = sampled(name)
    p_value = chi_square_p_value(sample_outputs(engine_for(target), algorithm, params), exact_joint(target, params))
    assert p_value > 1e-3, f"{algorithm} with {name} does not follow the processed target (p = {p_value:.2g})"


def prompt_counted(apply):
    """presence/frequency counting the prompt as output (a processor that reads the wrong prefix)."""
    return lambda self, logits, context, start, temperature: apply(
        replace(self, prompt_len=0), logits, context, start, temperature
    )


def one_short(apply):
    """min_tokens one token short: the stop id allowed one position early."""
    return lambda self, logits, context, start, temperature: apply(
        replace(self, min_tokens=self.min_tokens - 1), logits, context, start, temperature
    )


def drafter_bias_only(processed_rows):
    """The target's rows without the bias, the drafter's with it (a server that forgets it)."""
    return lambda self, h, c, s, d: processed_rows(self, h, c, s, replace(d, processors=None))


BIASES = {
    "penalties": lambda mp: mp.setattr(lp.LogitsProcessors, "apply", prompt_counted(lp.LogitsProcessors.apply)),
    "min_tokens": lambda mp: mp.setattr(lp.LogitsProcessors, "apply", one_short(lp.LogitsProcessors.apply)),
    "logit_bias": lambda mp: mp.setattr(
        simulated.SimulatedModel, "processed_rows", drafter_bias_only(simulated.SimulatedModel.processed_rows)
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PARAMS))
@pytest.mark.parametrize("algorithm", ["si", "dsi"])
def test_a_biased_processor_fails_the_distribution_test(monkeypatch, algorithm, name):
    target = target_model()
    params = sampled(name)
    want = exact_joint(target, params)  # before the bias is installed
    BIASES[name](monkeypatch)
    p_value = chi_square_p_value(sample_outputs(engine_for(target), algorithm, params), want)
    assert p_value < 1e-6, f"the test could not detect the biased {name} (p = {p_value:.2g})"


def processed_greedy(logits_at, prompt, n, params):
    """Greedy decoding from the definition: each token the argmax of the processed logits at its prefix."""
    proc, out = params.processors_for(len(prompt)), list(prompt)
    for _ in range(n):
        z = logits_at(out)[None] if proc is None else proc.apply(logits_at(out)[None], out, len(out), 0.0)
        out.append(int(z[0].argmax()))
    return out[len(prompt) :]


GREEDY = {
    "presence_penalty": dict(presence_penalty=0.8),
    "frequency_penalty": dict(frequency_penalty=0.6),
    "logit_bias": dict(logit_bias={1: 0.7, 4: -0.5}),
    "min_tokens": dict(min_tokens=6, stop_token_ids=[2]),
    "all": dict(presence_penalty=0.8, frequency_penalty=0.6, logit_bias={1: 0.7, 4: -0.5}, min_tokens=6,
                stop_token_ids=[2]),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(GREEDY))
@pytest.mark.parametrize("algorithm", ["nonsi", "si", "dsi", "hsd"])
def test_greedy_with_output_processors_is_the_processed_targets_greedy_on_simulated_models(algorithm, name):
    target = SimulatedModel(6, seed=3, spread=1.0)  # flat logits: the processors change many argmaxes
    drafter = target.drafter(0.7, seed=2)
    params = SamplingParams(temperature=0, max_tokens=30, **GREEDY[name])
    want = processed_greedy(lambda out: target.logits(target.prefix_hash(out)), [1, 2], 30, params)
    unprocessed = target.greedy_tokens([1, 2], 30)
    if "stop_token_ids" in GREEDY[name]:  # the control: without min_tokens the output would stop earlier
        assert 2 in unprocessed[:5] and 2 not in want[:6]
    else:
        assert want != unprocessed  # the control: the processor changes the output
    with Engine(target, [drafter] if algorithm == "hsd" else drafter, sp_degree=3) as engine:
        for k in (1, 3):
            got = engine.generate([1, 2], params, algorithm=algorithm, lookahead=k)
            assert got.tokens == want[: len(got.tokens)] and len(got.tokens) >= 6
            assert got.finish_reason == ("stop" if 2 in want and "stop_token_ids" in GREEDY[name] else "length")


@pytest.mark.parametrize("algorithm", ["si", "dsi"])
def test_greedy_with_output_processors_on_tiny_transformers(algorithm):
    target, drafter = tiny_pair(vocab=48, seed=3, noise=0.5)
    module = target.module_on("cpu")
    prompt = [5, 9, 5, 2]

    def logits_at(out):
        with torch.no_grad():
            return module(torch.tensor([out])).logits[0, -1].numpy()

    params = SamplingParams(temperature=0, max_tokens=12, presence_penalty=1.2, frequency_penalty=0.4,
                            logit_bias={7: 1.5}, ignore_eos=True)  # fmt: skip
    want = processed_greedy(logits_at, prompt, 12, params)
    plain = processed_greedy(logits_at, prompt, 12, SamplingParams(temperature=0, max_tokens=12))
    assert want != plain
    with Engine(target, drafter, sp_degree=2) as engine:
        assert engine.generate(prompt, params, algorithm=algorithm, lookahead=3).tokens == want
        assert engine.generate(prompt, params, algorithm="nonsi").tokens == want


def test_processors_counting_the_output_need_the_prompt_length():
    from specpar import ConfigError

    with pytest.raises(ConfigError, match="prompt's length"):
        SamplingParams(presence_penalty=1.0).decoding()
    assert np.isinf(SamplingParams(min_tokens=1, stop_token_ids=[0]).decoding(3).processors.apply(
        np.zeros((2, 4)), [1, 1, 1, 1], 3, 1.0)[0, 0])  # fmt: skip
