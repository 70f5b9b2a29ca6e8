"""The offline simulation's fast path: SI and DSI latencies from acceptance runs, vectorized over many runs.

On the virtual clock with uniform latencies (every target forward pass takes ``T``, every drafter pass ``t1``; TTFT =
TPOT, no per-token cost) and preemptible servers, an algorithm's time is a function of one thing only: which draft
positions the drafter gets right. Under greedy decoding the drafter's token at position i (given the correct prefix)
is right with probability ``a``, independently per position, so a run is a row of acceptance bits, read here through
``nz[i]`` = the first position >= i whose draft is wrong (``n`` if none). Times are pathwise those of
:func:`specpar.generate` on the :class:`~specpar.runtimes.VirtualRuntime` (tests check this run by run).

SI: a round at cursor p drafts kk = min(k, n-1-p) tokens (never the last), costs kk*t1 + T and yields
min(nz[p]-p, kk) + 1 tokens; time is linear in t1, so one pass gives every drafter latency:
``time = drafted * t1 + rounds * T``.

DSI, a recurrence over drafter chunks. State at a chunk's start: cursor p, time s the drafter starts drafting from
p, and time r at which the target's row for p is ready (a target task on p, or the previous verification's extra row).

* The chunk of kk = min(k, n-1-p) drafts arrives at A = s + kk*t1.
* While the row for the cursor is ready before the chunk arrives (r < A), the target takes that token itself (as
  non-SI would) and starts a pass on the next position: m tokens are taken this way.
* If the chunk arrives to find m >= 1 taken positions and a wrong draft among them (or m >= kk), it is discarded:
  the drafter restarts from the cursor at A while the target's pass on the cursor goes on.
* Otherwise its remaining drafts go to verification at A (one target pass, rows for p+m .. p+kk). The draft at p+m
  is judged at r, the others at that pass's end. A wrong draft is a rejection: every task is cancelled, all servers
  are free, and a clean restart begins (a target pass on the cursor and a new chunk, both at the rejection time).
  If all are right, the next chunk starts at A from p+kk with its first row ready when this pass ends.
* When only the last token remains (kk = 0) the run ends at r.

Target passes go to ``sp`` servers first come, first served, so Eq. 1 violations (queueing) are simulated too. Equal
times follow the virtual clock's rule: a chunk arriving with a target pass (to 1e-9) is seen first. With lookahead 1
and no queueing this is Proposition 1's pathwise time t1 * accepted + T * rounds.
"""

from __future__ import annotations

import numpy as np


def acceptance_uniforms(repeats: int, n: int, seed: int = 0) -> np.ndarray:
    """Uniforms [repeats, n]: position i's draft is right iff u[i] < a (common to every a and c)."""
    return np.random.default_rng(seed).random((repeats, n))


def next_rejection(u: np.ndarray, a: np.ndarray) -> np.ndarray:
    """nz [len(a), *u.shape[:-1], n+1] (int32): nz[..., i] = first j >= i with u[j] >= a, or n if none."""
    a = np.asarray(a, dtype=float)
    n = u.shape[-1]
    wrong = u[None, ...] >= a.reshape((-1,) + (1,) * u.ndim)
    idx = np.where(wrong, np.arange(n, dtype=np.int32), np.int32(n))
    idx = np.concatenate([idx, np.full(idx.shape[:-1] + (1,), n, dtype=np.int32)], axis=-1)
    return np.minimum.accumulate(idx[..., ::-1], axis=-1)[..., ::-1].astype(np.int32)


def si_counts(nz: np.ndarray, k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """SI with lookahead ``k`` [R] on runs ``nz`` [R, n+1]: (drafted tokens [R], rounds [R])."""
    k = np.asarray(k, dtype=np.int64)
    rows = np.arange(len(k))
    p = np.zeros(len(k), dtype=np.int64)
    drafted = np.zeros(len(k), dtype=np.int64)
    rounds = np.zeros(len(k), dtype=np.int64)
    live = p < n
    while live.any():
        kk = np.minimum(k, n - 1 - p)
        accepted = np.minimum(nz[rows, np.minimum(p, n)] - p, kk)
        drafted += np.where(live, kk, 0)
        rounds += live
        p = np.where(live, p + accepted + 1, p)
        live = p < n
    return drafted, rounds


def si_time(drafted, rounds, c):
    """SI's latency in target passes from its counts (:func:`si_counts`), broadcast over drafter latencies c."""
    return drafted * c + rounds


def _submit(free: np.ndarray, rows: np.ndarray, t: np.ndarray, target_ms: float) -> np.ndarray:
    """Start target passes submitted at ``t`` on each row's earliest-free server (FCFS); return their end times."""
    i = np.argmin(free[rows], axis=1)
    end = np.maximum(t, free[rows, i]) + target_ms
    free[rows, i] = end
    return end


def _row_first(r: np.ndarray, arrive: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Whether the target's row at the cursor (ready at ``r``) comes before the chunk (``arrive``), runs ``w``: the
    virtual clock takes a draft first when it ends with a target pass (to 1e-9)."""
    return np.round(r[w], 9) < np.round(arrive[w], 9)


def dsi_latency(nz: np.ndarray, k: np.ndarray, t1: np.ndarray, n: int, sp: int, target_ms: float = 1.0) -> np.ndarray:
    """DSI's latency [R] for runs ``nz`` [R, n+1] with lookahead ``k`` [R], drafter latency ``t1`` [R] (same unit
    as ``target_ms``) and ``sp`` target servers, following the recurrence in the module docstring."""
    R = len(nz)
    k = np.broadcast_to(np.asarray(k, dtype=np.int64), (R,)).copy()
    t1 = np.broadcast_to(np.asarray(t1, dtype=float), (R,)).copy()
    T = float(target_ms)
    out = np.full(R, np.nan)
    ids = np.arange(R)  # the runs still going, as indices into the caller's arrays
    p = np.zeros(R, dtype=np.int64)
    s = np.zeros(R)
    free = np.zeros((R, sp))
    r = _submit(free, np.arange(R), s, T)  # the first target pass, on position 0
    while ids.size:
        kk = np.minimum(k, n - 1 - p)
        done = kk <= 0  # only the last token is left: it is the target's row at p
        out[ids[done]] = r[done]
        arrive = s + (t1 + (kk - 1) * t1)  # summed as the simulated server sums it: equal times compare equal
        m = np.zeros(ids.size, dtype=np.int64)
        taking = ~done
        taking[taking] = _row_first(r, arrive, np.nonzero(taking)[0])
        while taking.any():  # the target takes the cursor's token itself while the chunk is still drafting
            w = np.nonzero(taking)[0]
            m[w] += 1
            last = p[w] + m[w] >= n
            out[ids[w[last]]] = r[w[last]]
            done[w[last]] = True
            w = w[~last]
            r[w] = _submit(free, w, r[w], T)
            taking = np.zeros(ids.size, dtype=bool)
            taking[w] = _row_first(r, arrive, w)
        first = nz[ids, np.minimum(p, n)]  # the first wrong draft from the chunk's start
        discard = ~done & (m >= 1) & ((m >= kk) | (first < p + m))
        kept = ~done & ~discard
        w = np.nonzero(kept)[0]
        end = np.zeros(ids.size)
        end[w] = _submit(free, w, arrive[w], T)  # verification of the chunk's untaken drafts
        e = nz[ids, np.minimum(p + m, n)]  # the first wrong draft among those judged
        reject_at_r = kept & (e == p + m)
        reject_at_end = kept & (e > p + m) & (e < p + kk)
        rejected = reject_at_r | reject_at_end
        t_reject = np.where(reject_at_r, r, end)
        clean = kept & ~rejected
        # discarded chunk: the drafter restarts from the cursor when it arrives; the target's pass goes on
        p = np.where(discard, p + m, p)
        s = np.where(discard, arrive, s)
        # every draft right: the next chunk starts when this one arrived
        p = np.where(clean, p + kk, p)
        s = np.where(clean, arrive, s)
        r = np.where(clean, end, r)
        # rejection: cancel everything, restart from the corrected cursor
        p = np.where(rejected, e + 1, p)
        s = np.where(rejected, t_reject, s)
        free[rejected] = t_reject[rejected, None]
        w = np.nonzero(rejected)[0]
        r[w] = _submit(free, w, s[w], T)
        keep = ~done
        ids, p, s, r, k, t1, free = (x[keep] for x in (ids, p, s, r, k, t1, free))
    return out
