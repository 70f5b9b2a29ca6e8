"""HSD on real transformers servers: a stack of tiny random-weight models sharing a vocabulary (no downloads).

The target is a random Qwen2 in float64; the drafters are copies with more and more
noise on their weights, so every level both accepts and rejects.
"""

from __future__ import annotations

import numpy as np
import pytest

from specpar import generate
from specpar.backends.transformers_model import TransformersModel
from specpar.core.latency import LatencyProfile
from tiny_transformers import perturbed, reference_greedy, tiny_module

VOCAB = 64


@pytest.fixture(scope="module")
def stack():
    """[M0, M1, M2, target]: noise 0.4, 0.2, 0.1 on the target's weights; latencies 0.05, 0.2, 0.5, 1 ms."""
    target = tiny_module(VOCAB, seed=5)
    modules = [perturbed(target, noise, seed=10 + i) for i, noise in enumerate((0.4, 0.2, 0.1))] + [target]
    costs = (0.05, 0.2, 0.5, 1.0)
    return [
        TransformersModel(m, name=f"tiny-{i}", latency=LatencyProfile.uniform(c))
        for i, (m, c) in enumerate(zip(modules, costs))
    ]


# (runtime, hierarchy, buffers): model indices from the bottom, the target (3) last
CASES = [("virtual", [0, 1, 3], [2, 4]), ("virtual", [0, 1, 2, 3], [2, 3, 5]), ("threads", [1, 2, 3], [1, 3])]


def test_hsd_on_transformers_stacks_returns_the_targets_own_greedy_generate(stack, no_thread_leak):
    n, accepted, tested = 16, 0, 0
    for seed, (runtime, levels, buffers) in enumerate(CASES):
        prompt = [int(x) for x in np.random.default_rng(seed).integers(0, VOCAB, size=4 + seed)]
        out = generate(
            prompt,
            stack[3],
            [stack[m] for m in levels[:-1]],
            algorithm="hsd",
            buffers=buffers,
            max_tokens=n,
            runtime=runtime,
        )
        assert out.tokens == reference_greedy(stack[3], prompt, n), f"levels {levels}, T = {buffers} on {runtime}"
        accepted += sum(out.details["accepted_per_level"])
        tested += sum(out.details["tested_per_level"])
    assert 0 < accepted < tested  # drafts were both accepted and rejected
