"""HSD: hierarchical speculative decoding (Globerson, Kaplan, Mansour, Mohri, Schuster et al. 2025, Algorithm 1).

Models M0 < M1 < ... < MK, one pool each (``levels``), MK the target; buffer sizes
T_0 .. T_{K-1} (``buffers``).

* M0 drafts T_0 tokens autoregressively (one Draft call).
* Mi (0 < i < K) asks the level below for a batch, verifies it in one forward pass
  (one Score call: exact match when greedy, rejection sampling when sampling), keeps
  the accepted prefix plus its own replacement or bonus token, and asks again from the
  extended context until it holds at least T_i tokens; it hands up exactly the first
  T_i. (The overshoot of the last batch is dropped: a fixed batch size is what makes
  the expected cost of a level a function of (alpha, T_lower, T_upper) alone, see
  specpar.hsd_latency; the dropped tokens are drafts, never output.)
* MK verifies one batch from MK-1 per round through :class:`Generation`, as SI does.
  With K = 1 this is SI with lookahead T_0.

Sampling: the tokens Mi hands up are distributed as Mi's own distribution p_i
(accepted drafts, residual replacements and bonus tokens all are, by the rejection
sampling lemma), so they travel up with Mi's rows as their ``q``. Every level draws
its acceptance, residual and bonus uniforms from its own seed (:func:`level_decoding`):
a level above must not reuse the uniform that decided the token it is testing.
By induction over the levels the output follows the target's distribution whatever
the hierarchy (the paper's Theorem 2.1); tests/test_hsd_lossless.py checks it.

No level drafts past the last output token (the target makes that one itself).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specpar.algorithms.generation import Generation, check_positive_int
from specpar.calls import Draft, Proposal, Score
from specpar.decoding import GREEDY, Decoding, mix64
from specpar.errors import ConfigError
from specpar.results import GenerationResult
from specpar.runtimes.base import Pool, Runtime
from specpar.verification import verify_chain

_LEVEL_SALT = 0x2545F4914F6CDD1D


def level_decoding(decoding: Decoding, level: int) -> Decoding:
    """The decoding an intermediate level verifies with: same temperature, independent uniforms."""
    return Decoding(decoding.temperature, mix64(decoding.seed ^ ((level + 1) * _LEVEL_SALT)))


def check_buffers(buffers: Sequence[int], n_drafters: int) -> list[int]:
    if len(buffers) != n_drafters:
        raise ConfigError(f"HSD needs one buffer size T_i per drafter level: {n_drafters} drafters, "
                          f"got {len(buffers)} buffer sizes {list(buffers)}")
    return [check_positive_int(f"buffer size T_{i}", t) for i, t in enumerate(buffers)]


def hsd(
    runtime: Runtime,
    levels: Sequence[Pool],
    prompt: Sequence[int],
    max_new_tokens: int,
    buffers: Sequence[int],
    decoding: Decoding = GREEDY,
) -> GenerationResult:
    """levels: [K+1] pools, M0 (the only autoregressive drafter) first, the target MK last.
    buffers: [K] T_0 .. T_{K-1}: tokens M0 drafts per call, tokens Mi hands up per call.
    """
    if len(levels) < 2:
        raise ConfigError("HSD needs at least one drafter level below the target")
    K = len(levels) - 1
    T = check_buffers(buffers, K)
    g = Generation(prompt, max_new_tokens, decoding, runtime)
    verifier = [level_decoding(decoding, m) for m in range(K)]
    tested, accepted = [0] * (K + 1), [0] * (K + 1)
    calls, forwards = [0] * (K + 1), [0] * (K + 1)  # requests to each level; its forward passes

    def fill(m: int, context: tuple[int, ...]) -> Proposal:
        """M_m's next T_m tokens after ``context`` (fewer only at the end of the generation), with their rows."""
        want = min(T[m], g.stop - 1 - len(context))
        calls[m] += 1
        if m == 0:
            forwards[0] += want
            return runtime.run(levels[0], Draft(context, want, decoding))
        tokens, rows = [], []
        while len(tokens) < want:
            batch = fill(m - 1, context + tuple(tokens))
            scores = runtime.run(levels[m], Score(context + tuple(tokens) + tuple(batch.tokens), len(batch.tokens), decoding))
            forwards[m] += 1
            n, token = verify_chain(batch.tokens, batch.q, scores.rows, verifier[m], scores.start)
            tested[m] += min(n + 1, len(batch.tokens))
            accepted[m] += n
            tokens += batch.tokens[:n] + [token]
            rows.extend(scores.rows[: n + 1])  # M_m's own row at each kept position: the q of the level above
        return Proposal(tokens[:want], None if decoding.greedy else np.stack(rows[:want]))

    while not g.done:
        proposal = fill(K - 1, g.context()) if g.lookahead_at(len(g.out), 1) else Proposal([])
        scores = runtime.run(levels[K], Score(g.context(proposal.tokens), len(proposal.tokens), decoding))
        calls[K] += 1
        forwards[K] += 1
        g.verify(proposal, scores)
    result = g.result("hsd", lookahead=T[K - 1], sp_degree=1)
    tested[K], accepted[K] = result.drafted, result.accepted
    result.target_forwards = forwards[K]
    result.drafter_forwards = sum(forwards[:K])  # every model below the target
    result.details = {
        "buffers": T,
        "calls_per_level": calls,  # M0: Draft calls; Mi: requests for T_i tokens; MK: rounds
        "forwards_per_level": forwards,  # M0: drafted tokens; Mi, MK: verification passes
        "acceptance_rate_per_level": [None] + [accepted[m] / tested[m] if tested[m] else None for m in range(1, K + 1)],
        "tested_per_level": tested,
        "accepted_per_level": accepted,
    }
    return result
