"""Verification: pure functions deciding which draft tokens the target keeps.

Greedy: a draft is accepted iff it equals the target's argmax; otherwise the argmax replaces it (exact match).

Sampling (Leviathan et al. 2023; Chen et al. 2023): draft ``x ~ q`` is accepted with probability
``min(1, p(x) / q(x))``; on rejection the replacement is drawn from ``norm(max(0, p - q))``; when every draft passes,
a bonus token is drawn from ``p`` at the next position. The token at every position is then distributed exactly as
``p``. With ``Decoding.coupling == "gumbel"`` a draft is accepted iff it equals the target's Gumbel-max sample at its
position (:func:`specpar.core.decoding.gumbel_sample`), the token kept either way: lossless, independent of drafts.

Rows follow :class:`specpar.core.calls.Scores`: an argmax id when greedy, a [V] probability vector when sampling.
Every random draw is keyed by position (:mod:`specpar.core.decoding`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specpar.core.decoding import ACCEPT, BONUS, RESIDUAL, Decoding, gumbel_sample, sample
from specpar.core.trees import sibling_stream


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, p - q)): the distribution a rejected draft is replaced from ([V] -> [V])."""
    r = np.maximum(p - q, 0.0)
    total = r.sum()
    # total == 0 only when p == q, where a rejection has probability 0; fall back to p.
    return r / total if total > 0 else p


def judge(draft: int, q_row, row, decoding: Decoding, position: int) -> tuple[bool, int]:
    """Test one draft token at ``position``: (accepted, token kept there). q_row: the [V] drafter probabilities it
    was sampled from (None when greedy); row: the target's row there (argmax id when greedy, [V] p when sampling)."""
    if decoding.greedy:
        return draft == row, row
    if decoding.coupling == "gumbel":  # the target's own token, the same whatever was drafted
        token = gumbel_sample(row, decoding.seed, position)
        return draft == token, token
    p_x, q_x = row[draft], q_row[draft]
    if decoding.uniform(ACCEPT, position) * q_x < p_x:  # u < p(x) / q(x)
        return True, draft
    return False, sample(residual(row, q_row), decoding.uniform(RESIDUAL, position))


def bonus(row, decoding: Decoding, position: int) -> int:
    """The target's own token at ``position`` when no draft is tested there."""
    if decoding.greedy:
        return row
    if decoding.coupling == "gumbel":
        return gumbel_sample(row, decoding.seed, position)
    return sample(row, decoding.uniform(BONUS, position))


def verify_chain(drafts: Sequence[int], q, rows: Sequence, decoding: Decoding, start: int) -> tuple[int, int]:
    """Verify k drafts at positions start..start+k-1 against k+1 target rows (q: [k, V] drafter rows, None when
    greedy): (n_accepted, the token after them: the first rejected draft's correction, or the bonus)."""
    for i, x in enumerate(drafts):
        accepted, token = judge(x, None if q is None else q[i], rows[i], decoding, start + i)
        if not accepted:
            return i, token
    n = len(drafts)
    return n, bonus(rows[n], decoding, start + n)


def judge_siblings(draws, tokens: Sequence[int], row, decoding: Decoding, position: int) -> tuple[int | None, int]:
    """SpecInfer's multi-step speculative sampling at one node of a token tree: (accepted child or None, token).

    draws: the samples drawn under the node, in order, as (child node, [V] q row it was drawn from; None when
    greedy); tokens: every node's token. Sampling: draw j is accepted with probability min(1, p(x_j) / q_j(x_j));
    after each rejection the target row becomes p <- norm(max(0, p - q_j)) for the next draw; when every draw is
    rejected the token comes from the last residual (from p itself when there are no draws: a leaf's bonus).
    Greedy: the child whose token is the target's argmax, if any; the Gumbel coupling: the child whose token is
    the target's Gumbel-max sample, if any (the token is that sample either way). One draw reduces to :func:`judge`.
    """
    if decoding.greedy or decoding.coupling == "gumbel":
        token = row if decoding.greedy else gumbel_sample(row, decoding.seed, position)
        for child, _ in draws:
            if tokens[child] == token:
                return child, token
        return None, token
    if not draws:
        return None, bonus(row, decoding, position)
    p = row
    for j, (child, q_row) in enumerate(draws):
        x = tokens[child]
        if decoding.uniform(sibling_stream(ACCEPT, j), position) * q_row[x] < p[x]:
            return child, x
        p = residual(p, q_row)
    return None, sample(p, decoding.uniform(RESIDUAL, position))


def verify_tree(tree, rows: Sequence, decoding: Decoding, start: int, node: int = -1) -> tuple[list[int], int]:
    """Verify a token tree against the target's rows from one pass: (accepted nodes in order, the token after them).

    rows[0] is the target's row at the root (position ``start``), rows[1 + i] the row after node i. Walks down from
    ``node`` (-1: the root; DSI resumes below an accepted node), testing each node's draws with :func:`judge_siblings`.
    """
    path = []
    while True:
        depth = tree.depths[node] if node >= 0 else 0
        child, token = judge_siblings(tree.draws.get(node, ()), tree.tokens, rows[node + 1], decoding, start + depth)
        if child is None:
            return path, token
        path.append(child)
        node = child
