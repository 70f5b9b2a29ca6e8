"""Real transformers servers: lossless output, KV-cache reuse and cropping, sampling, and clear errors.

Tiny random-weight Qwen2 models built here in float64 (no downloads): the
drafter is the target with noise on its weights, so drafts are often but not
always accepted and every path (accept, reject, crop, cancel) runs.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from specpar import generate
from specpar.backends.transformers_model import TransformersModel, check_fits
from specpar.core.calls import Draft, Score
from specpar.core.decoding import Decoding
from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.core.prefix import common_prefix_len
from stats import chi_square_p_value, output_counts
from tiny_transformers import reference_greedy, tiny_module, tiny_pair

# target 1 ms per pass, drafter 0.3 ms (c = 0.3), verification of k drafts costs 0.1 ms per draft
LATENCIES = (LatencyProfile(1.0, 1.0, 0.1), LatencyProfile(0.3, 0.3))


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=64, seed=3, noise=0.1, latencies=LATENCIES)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["threads", "virtual"])
def test_every_algorithm_returns_the_targets_own_greedy_generate(pair, runtime, no_thread_leak):
    target, drafter = pair
    n, acceptance = 24, []
    prompts = [[int(x) for x in np.random.default_rng(seed).integers(0, 64, size=5 + seed)] for seed in range(8)]
    prompts.append([0, 17, 0, 0, 5])  # token 0 is an ordinary token (a pad id would mask it out)
    for seed, prompt in enumerate(prompts):
        expected = reference_greedy(target, prompt, n)
        for algorithm, k, sp in [
            ("nonsi", None, 1),
            ("si", 1, 1),
            ("si", 4, 1),
            ("dsi", 1, 2),
            ("dsi", 3, 3),
            ("dsi", 6, 2),
        ]:
            res = generate(
                prompt,
                target,
                drafter,
                algorithm=algorithm,
                max_tokens=n,
                lookahead=k,
                sp_degree=sp,
                runtime=runtime,
            )
            assert res.tokens == expected, f"{algorithm} k={k} sp={sp} prompt seed {seed} on {runtime}"
            if algorithm != "nonsi":
                acceptance.append(res.acceptance_rate)
    # the drafter neither always agrees nor never: accept and reject paths both ran
    assert 0.3 < np.nanmean(acceptance) < 0.95, acceptance


def test_the_reference_attends_to_token_0(pair):
    """reference_greedy is the target's own argmax, step by step, for a prompt full of 0s (once taken for padding)."""
    import torch

    target, _ = pair
    module, ids = target.module_on("cpu"), [0, 3, 0, 0]
    with torch.no_grad():
        for _ in range(6):
            ids.append(int(module(torch.tensor([ids])).logits[0, -1].argmax()))
    assert reference_greedy(target, [0, 3, 0, 0], 6) == ids[4:]


def test_a_wrong_server_is_caught(pair):
    """The equality test has power: a target server that returns one wrong token is detected."""
    target, drafter = pair
    prompt, n = [1, 2, 3], 12
    expected = reference_greedy(target, prompt, n)

    class OffByOne(TransformersModel):
        def server(self, name=None, device=None):
            s = super().server(name, device)
            score = s._score

            def wrong(call):  # the row for output position 5, wherever it appears, is off by one
                out = score(call)
                pos = len(prompt) + 5
                if out.start <= pos <= out.end:
                    out.rows[pos - out.start] = (out.rows[pos - out.start] + 1) % 64
                return out

            s._score = wrong
            return s

    bad = OffByOne(target.module_on("cpu"), latency=target.latency)
    for algorithm in ("nonsi", "si", "dsi"):
        res = generate(prompt, bad, drafter, algorithm=algorithm, max_tokens=n, lookahead=3)
        assert res.tokens[:5] == expected[:5] and res.tokens[5] != expected[5]


def _fresh_probs(module, context):
    """softmax of a fresh full forward pass (no cache): rows for every position 1..len(context)."""
    with torch.no_grad():
        logits = module(torch.tensor([list(context)])).logits[0]
    return torch.softmax(logits.double(), -1).numpy()


def test_cache_reuse_and_cropping_give_the_logits_of_a_fresh_forward_pass(pair):
    target, _ = pair
    module = target.module_on("cpu")
    server = target.server("t")
    sampling = Decoding(1.0, 0)
    rng = np.random.default_rng(0)
    base = tuple(int(x) for x in rng.integers(0, 64, size=12))
    contexts = [
        base,  # prefill
        base + (5, 6, 7),  # extends: only 3 new tokens
        base + (5, 9),  # diverges: crop to base + (5,)
        base[:6],  # shorter: crop
        base[:6] + (1, 2, 3, 4, 5, 6),  # extend again
        base + (5, 9),  # back to an older branch
    ]
    forward, fed = server._forward, []
    server._forward = lambda new: fed.append(len(new)) or forward(new)
    expected, previous = [], ()
    for i, ctx in enumerate(contexts):
        n = 3 if len(ctx) > 4 else 0
        got = server.run(Score(ctx, n, sampling))
        fresh = _fresh_probs(module, ctx)[len(ctx) - n - 1 :]
        np.testing.assert_allclose(got.rows, fresh, rtol=0, atol=1e-12, err_msg=f"context {i}")
        assert server.tokens == ctx  # the cache holds exactly the context
        # unseen tokens only: what follows the prefix shared with the cache, or the first position a row is wanted for
        expected.append(len(ctx) - min(common_prefix_len(previous, ctx), len(ctx) - n - 1))
        previous = ctx
    assert server.forwards == len(contexts) and fed == expected
    assert sum(fed) < 0.6 * sum(map(len, contexts))  # 38 of 73 tokens: re-running every context would feed all


def test_drafting_uses_the_cache_and_leaves_it_consistent(pair):
    _, drafter = pair
    server = drafter.server("d")
    ctx = (3, 1, 4, 1, 5, 9, 2, 6)
    proposal = server.run(Draft(ctx, 5, Decoding()))
    # greedy drafts are the drafter's own greedy continuation
    assert proposal.tokens == reference_greedy(drafter, list(ctx), 5)
    assert server.tokens == ctx + tuple(proposal.tokens[:-1])
    # sampling: q rows are the drafter's distributions at each drafted position
    proposal = server.run(Draft(ctx, 3, Decoding(0.8, 7)))
    module = drafter.module_on("cpu")
    with torch.no_grad():
        logits = module(torch.tensor([list(ctx) + proposal.tokens])).logits[0].double()
    expected_q = torch.softmax(logits / 0.8, -1).numpy()[len(ctx) - 1 : len(ctx) + 2]
    np.testing.assert_allclose(proposal.q, expected_q, rtol=0, atol=1e-12)


def test_a_cancelled_draft_stops_between_passes_and_keeps_the_cache_exact(pair):
    _, drafter = pair
    import threading

    server = drafter.server("d")
    cancelled = threading.Event()
    cancelled.set()
    ctx = (1, 2, 3, 4)
    assert server.run(Draft(ctx, 5, Decoding()), cancelled) is None
    assert server.forwards == 1 and server.tokens == ctx
    got = server.run(Score(ctx + (7,), 1, Decoding(1.0, 0)))
    np.testing.assert_allclose(got.rows, _fresh_probs(drafter.module_on("cpu"), ctx + (7,))[-2:], rtol=0, atol=1e-12)


def test_servers_of_one_model_on_one_device_share_the_weights(pair):
    target, _ = pair
    a, b, _ = target.servers(3, prefix="t")
    assert a.module is b.module and a._cache is None and b._cache is None
    a.run(Score((1, 2, 3), 0, Decoding()))
    assert b.tokens == () and a.tokens == (1, 2, 3)


# 750 samples: the drafter's own law (the power check below) is rejected at p = 3e-18 (SI) and 7e-23 (DSI) with
# them, p < 1e-6 wanted (4e-48 and 1e-45 with 1,500)
V, N, PROMPT, SAMPLES = 4, 2, [0, 1], 750


@pytest.fixture(scope="module")
def small_vocab_pair():
    target = tiny_module(vocab=V, seed=11, layers=1, scale=0.3)
    drafter = tiny_module(vocab=V, seed=12, layers=1, scale=0.3)
    return (TransformersModel(target, latency=LATENCIES[0]), TransformersModel(drafter, latency=LATENCIES[1]))


def _joint(model: TransformersModel, temperature: float) -> dict:
    module = model.module_on("cpu")
    out = {}
    for seq in itertools.product(range(V), repeat=N):
        with torch.no_grad():
            logits = module(torch.tensor([PROMPT + list(seq)])).logits[0].double()
        probs = torch.softmax(logits / temperature, -1).numpy()
        out[seq] = float(np.prod([probs[len(PROMPT) - 1 + i][t] for i, t in enumerate(seq)]))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("algorithm,lookahead", [("si", 2), ("dsi", 1)])
def test_sampling_follows_the_targets_distribution(small_vocab_pair, algorithm, lookahead):
    target, drafter = small_vocab_pair
    temperature = 0.9
    counts = output_counts(
        PROMPT,
        target,
        drafter,
        SAMPLES,
        algorithm=algorithm,
        max_tokens=N,
        lookahead=lookahead,
        sp_degree=2,
        temperature=temperature,
    )
    target_joint, drafter_joint = _joint(target, temperature), _joint(drafter, temperature)
    assert chi_square_p_value(counts, target_joint) > 1e-3
    # power: the same samples reject the drafter's own distribution (what a sampler that skipped verification gives)
    assert chi_square_p_value(counts, drafter_joint) < 1e-6


def test_a_context_longer_than_the_window_is_a_clear_error():
    target = TransformersModel(tiny_module(vocab=16, seed=0, layers=1, context=16), name="short")
    with pytest.raises(ConfigError, match="12 tokens and 8 new .* short's context window is 16 tokens"):
        generate(list(range(12)), target, algorithm="nonsi", max_tokens=8, runtime="threads")  # refused up front
    server = target.server("t")  # and a server itself refuses a context it cannot hold
    with pytest.raises(ConfigError, match="exceeds short's context window of 16 tokens"):
        server.compute(Score(tuple(range(17)), 0, Decoding()))


def test_replicas_that_do_not_fit_in_memory_are_refused_before_allocating(pair):
    target, _ = pair
    with pytest.raises(ConfigError, match="lower sp_degree"):
        target.servers(4, max_tokens=1 << 40)
    with pytest.raises(ConfigError, match="lower sp_degree"):
        check_fits(target, "cpu", 1, 1 << 40)


@pytest.mark.parametrize("algorithm", ["nonsi", "si", "dsi"])
def test_ready_made_servers_are_reused_and_stream_the_verified_tokens_in_order(pair, algorithm, no_thread_leak):
    from specpar.runtimes import Pool

    target, drafter = pair
    targets, drafters = Pool(target.servers(3, prefix="t"), "target"), Pool([drafter.server("d")], "drafter")
    for prompt in ([5, 6, 7], [5, 6, 7, 8, 9]):  # the second reuses the caches the first left behind
        streamed: list[list[int]] = []
        res = generate(
            prompt,
            targets,
            drafters,
            algorithm=algorithm,
            max_tokens=15,
            lookahead=3,
            sp_degree=3,
            runtime="threads",
            stream=streamed.append,
        )
        assert res.tokens == reference_greedy(target, prompt, 15)
        assert [t for run in streamed for t in run] == res.tokens and all(streamed)
