"""Simulated language models: deterministic next-token distributions over a small vocabulary.

A :class:`SimulatedModel` plays the target. Its distribution at a position is a deterministic function of (seed,
prefix): the prefix is folded into a 64-bit rolling hash ``h`` (one step per token: :func:`extend`), and from ``h``
come the mode ``m(h)`` (the greedy token) and ``p(h)``, a softmax over the vocabulary with the mode strongest and one
token ``z(h) != m(h)`` at probability 0 (so that a drafter can disagree completely).

A :class:`SimulatedDrafter` is derived from a target with an acceptance rate ``a``. Greedy: its argmax is the
target's mode with probability ``a``, independently per position (a hash of (drafter seed, h) decides). Sampling:
``q = a * p + (1 - a) * onehot(z)``, so ``sum_x min(p(x), q(x)) = 1 - TV(p, q) = a`` exactly. The two behaviours are
specified separately (the greedy token is not argmax q); each gives iid acceptance with rate ``a``.

A :class:`SimulatedServer` is one instance of a model with its own cache (the hashes of the prefix it saw last,
reused up to the longest common prefix like a KV cache) and a latency profile: under the virtual clock it reports
durations, under threads it sleeps for them.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import threading
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from specpar.core.calls import Context, Draft, DraftTree, Proposal, Score, Scores, ScoreTree, as_context
from specpar.core.decoding import Decoding, mix64
from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.core.logits_processors import rows, scaled
from specpar.core.model import Model, Server
from specpar.core.numbers import is_int, is_number
from specpar.core.prefix import common_prefix_len, shared_base_lcp
from specpar.core.trees import BestFirst, TokenTree, expand, grow_best_first

_MASK = (1 << 64) - 1
_GOLD = 0x9E3779B97F4A7C15
_Z_SALT = 0x5A5A5A5A12345678
_LOGIT_SALT = 0x3C6EF372FE94F82B
_AGREE_SALT = 0xA4093822299F31D0
_WRONG_SALT = 0x082EFA98EC4E6C89
_TWO64 = 18446744073709551616.0


def extend(h: int, token: int) -> int:
    """Hash of (prefix + token) from the hash ``h`` of prefix: CPython's tuple hash (xxHash-based, in C),
    deterministic for ints on 64-bit builds whatever PYTHONHASHSEED says, and 7x faster than a splitmix64 step in
    Python (the simulator's innermost operation: one per token a server reads)."""
    return hash((h, token))


def unit(h: int, salt: int) -> int:
    """A well-mixed 64-bit unsigned value derived from hash ``h`` and ``salt`` (divide by 2**64 for a uniform)."""
    return hash((h, salt)) & _MASK


def peaked_logits(h: int, vocab_size: int, spread: float, mode: int, zeros) -> np.ndarray:
    """[V] logits at prefix hash h: ``mode`` gets ``spread``, the others uniform in [0, spread) from h, and the
    tokens ``zeros`` (an id or a list of ids) -inf (probability 0)."""
    logits = np.array([mix64((h ^ ((j + 1) * _LOGIT_SALT)) & _MASK) / _TWO64 for j in range(vocab_size)]) * spread
    logits[mode] = spread
    logits[zeros] = -math.inf
    return logits


def peaked_probs(h: int, vocab_size: int, spread: float, mode: int, zeros, temperature: float) -> np.ndarray:
    """[V] softmax(peaked_logits / T) at prefix hash h (scaled as every server does: logits_processors.scaled)."""
    e = np.exp(scaled(peaked_logits(h, vocab_size, spread, mode, zeros), temperature))
    return e / e.sum()


class SimulatedLM(Model):
    """What the simulated target and drafters share: the prefix hash and the server interface."""

    kind = "simulated"
    logits = None  # SimulatedModel's: its logits for a prefix hash (a stack's models have none)

    vocab_size: int
    latency: LatencyProfile
    h0: int

    extend = staticmethod(extend)

    @property
    def max_token_id(self) -> int:
        """The largest id a prompt may hold: the vocabulary is 0 .. vocab_size - 1 (generate() refuses others)."""
        return self.vocab_size - 1

    def prefix_hash(self, tokens) -> int:
        h = self.h0
        for t in tokens:
            h = self.extend(h, t)
        return h

    def argmax(self, h: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def probs(self, h: int, temperature: float) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def argmaxes(self, hashes: Sequence[int]) -> list[int]:
        """argmax at each of the prefixes ``hashes`` (a greedy verification's rows)."""
        return [self.argmax(h) for h in hashes]

    # A drafter may depend on the position it drafts at (a drifting acceptance rate: Regimes); these two are what
    # drafting reads, the target's own rows (argmax, probs) never depend on it.
    def argmax_at(self, h: int, position: int | None) -> int:
        """The greedy draft at prefix hash h, at ``position`` (None: wherever)."""
        return self.argmax(h)

    def probs_at(self, h: int, temperature: float, position: int | None) -> np.ndarray:
        """The row a draft at ``position`` (None: wherever) is drawn from, at prefix hash h."""
        return self.probs(h, temperature)

    def greedy_run(self, h: int, k: int, hashes: list[int], position: int | None = None) -> list[int]:
        """The k greedy tokens after the prefix with hash h (the first at ``position``), their hashes onto ``hashes``."""
        tokens = []
        for i in range(k):
            tok = self.argmax_at(h, None if position is None else position + i)
            tokens.append(tok)
            h = extend(h, tok)
            hashes.append(h)
        return tokens

    def processed_rows(self, hashes, context, start: int, decoding: Decoding):
        """Rows for the prefixes with hashes ``hashes`` (positions start, start + 1, ...; prefixes
        context[:start + i]) through the request's logits processors (:func:`specpar.core.logits_processors.rows`)."""
        logits = self.logits
        if logits is None:
            raise ConfigError(
                f"{type(self).__name__} has no logits, so top_k, top_p, min_p and repetition_penalty cannot "
                "reshape its rows: use SimulatedModel targets (and their drafters) or transformers models"
            )
        return rows(np.stack([logits(h) for h in hashes]), context, start, decoding)

    def ranked(self, h: int, k: int, position: int | None = None) -> list[int]:
        """The k best candidates at prefix hash h (greedy token trees): the argmax, then by decreasing probability."""
        first = self.argmax_at(h, position)
        rest = [int(t) for t in np.argsort(-self.probs_at(h, 1.0, position), kind="stable") if t != first]
        return [first, *rest][:k]

    def candidates(
        self, h: int, k: int, decoding: Decoding, position: int | None = None
    ) -> tuple[list[int], list[float]]:
        """Best-first token trees: the drafter's k best tokens at prefix hash h and its probability of each (greedy:
        :meth:`ranked` with the probabilities at temperature 1; sampling: the top of the row at the temperature)."""
        if decoding.greedy:
            tokens = self.ranked(h, k, position)
            row = self.probs_at(h, 1.0, position)
        else:
            row = self.probs_at(h, decoding.temperature, position)
            tokens = [int(t) for t in np.argsort(-row, kind="stable")[:k]]
        return tokens, [float(row[t]) for t in tokens]

    def server(self, name: str | None = None) -> SimulatedServer:
        """A new instance of this model with an empty cache."""
        return SimulatedServer(self, name)

    # Reference decoding, straight from the definition (no servers, no runtime): for tests.
    def greedy_tokens(self, prompt, n: int) -> list[int]:
        return self.greedy_run(self.prefix_hash(prompt), n, [])

    def sequence_probability(self, prompt, tokens, temperature: float = 1.0) -> float:
        """Probability that sampling at ``temperature`` yields ``tokens`` after ``prompt``."""
        h, prob = self.prefix_hash(prompt), 1.0
        for t in tokens:
            prob *= float(self.probs(h, temperature)[t])
            h = self.extend(h, t)
        return prob


class SimulatedModel(SimulatedLM):
    """A simulated target language model of ``vocab_size`` tokens V (>= 2), its distributions selected by ``seed``.

    spread: logit range; larger makes p more peaked (the mode's logit is ``spread``, the others uniform in [0, spread)).
    """

    def __init__(self, vocab_size: int = 8, seed: int = 0, latency: LatencyProfile | None = None, spread: float = 3.0):
        if not isinstance(vocab_size, int) or vocab_size < 2:
            raise ConfigError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
        self.vocab_size = vocab_size
        self.seed = seed
        self.latency = latency if latency is not None else LatencyProfile.uniform(1.0)
        self.spread = float(spread)
        self.h0 = mix64((seed * _GOLD + 0x1234567) & _MASK)

    def argmax(self, h: int) -> int:
        return (h >> 8) % self.vocab_size

    def argmaxes(self, hashes: Sequence[int]) -> list[int]:
        v = self.vocab_size  # argmax inlined: every greedy verification on the virtual clock comes here
        return [(h >> 8) % v for h in hashes]

    def excluded(self, h: int) -> int:
        """The token z(h) with p = 0 at this position (never the mode)."""
        v = self.vocab_size
        return (self.argmax(h) + 1 + mix64(h ^ _Z_SALT) % (v - 1)) % v

    def probs(self, h: int, temperature: float = 1.0) -> np.ndarray:
        return peaked_probs(h, self.vocab_size, self.spread, self.argmax(h), self.excluded(h), temperature)

    def logits(self, h: int) -> np.ndarray:
        """[V] raw logits at the prefix with hash h (probs is their softmax at a temperature)."""
        return peaked_logits(h, self.vocab_size, self.spread, self.argmax(h), self.excluded(h))

    def drafter(
        self,
        acceptance_rate: float | Regimes,
        latency: LatencyProfile | None = None,
        seed: int = 1,
        rows: int | None = None,
    ) -> SimulatedDrafter:
        """A drafter for this target with acceptance rate ``a`` (see module docstring): iid, or drifting between
        :class:`Regimes`; ``rows``: its own output rows, padding beyond the target's vocabulary (or short of it)."""
        return SimulatedDrafter(self, acceptance_rate, latency, seed, rows)


class Regimes:
    """A drifting acceptance process: the drafter agrees with rate ``rates[i]`` in regime i, and regimes last
    ``every`` positions each (positions in the sequence, the prompt's included).

    seed: None: the regimes follow each other in order, cycling (0.9, 0.4, 0.9, ... for rates (0.9, 0.4)); an
    integer: each span of ``every`` positions draws its regime uniformly at random, deterministically by the seed.
    """

    __slots__ = ("rates", "every", "seed")

    def __init__(self, rates: Sequence[float], every: int, seed: int | None = None):
        if isinstance(rates, (str, bytes)) or not isinstance(rates, Sequence) or not rates:
            raise ConfigError(f"regimes need a non-empty list of acceptance rates, got {rates!r}")
        for r in rates:
            if not is_number(r, 0.0, 1.0):
                raise ConfigError(f"each regime's acceptance rate must be in [0, 1], got {r!r}")
        if not is_int(every, 1):
            raise ConfigError(f"a regime lasts a positive number of tokens, got {every!r}")
        self.rates = tuple(float(r) for r in rates)
        self.every = every
        self.seed = seed

    def regime_at(self, position: int) -> int:
        span = position // self.every
        if self.seed is None:
            return span % len(self.rates)
        return unit(mix64(self.seed & _MASK), span) % len(self.rates)

    def rate_at(self, position: int) -> float:
        return self.rates[self.regime_at(position)]

    @property
    def mean(self) -> float:
        """The long-run acceptance rate (each regime equally often)."""
        return sum(self.rates) / len(self.rates)

    @classmethod
    def parse(cls, text: str, seed: int | None = None) -> Regimes:
        """``"0.9,0.4:50"``: rates 0.9 and 0.4, switching every 50 tokens."""
        try:
            rates, every = text.replace(" ", "").split(":")
            return cls([float(r) for r in rates.split(",")], int(every), seed)
        except ValueError:
            raise ConfigError(
                f"regimes are A1,A2,...:T (acceptance rates, switching every T tokens), e.g. 0.9,0.4:50; got {text!r}"
            ) from None

    def __repr__(self) -> str:
        return f"Regimes({','.join(f'{r:g}' for r in self.rates)}:{self.every})"


PADDING_MASS = 0.05  # what a padded drafter's native rows give its padding rows, together (a real model gives some)


def fit_probs(row: np.ndarray, width: int) -> np.ndarray:
    """A probability row [n] as [width]: columns beyond ``width`` dropped (and the rest renormalized), missing ones
    added at probability 0."""
    n = len(row)
    if n >= width:
        kept = row[:width]
        return kept / kept.sum()
    return np.concatenate([row, np.zeros(width - n)])


class SimulatedDrafter(SimulatedLM):
    """A drafter derived from a :class:`SimulatedModel` with acceptance rate ``a`` in [0, 1], or drifting between
    the rates of :class:`Regimes` (the rate at the position drafted).

    rows: its own output rows R (default: the target's vocabulary V). R > V: rows V.. are padding, to which its
    native rows give PADDING_MASS; R < V: it cannot say the tokens from R on (its native rows are q cut there,
    renormalized; a greedy draft t >= R becomes t mod R). Its servers return rows ``vocab_size`` wide: R, or the
    target's width after :meth:`with_rows` (padding at probability 0: :mod:`specpar.backends.vocabulary`).
    """

    def __init__(
        self,
        target: SimulatedModel,
        acceptance_rate: float | Regimes,
        latency: LatencyProfile | None = None,
        seed: int = 1,
        rows: int | None = None,
    ):
        self.regimes = acceptance_rate if isinstance(acceptance_rate, Regimes) else None
        a = self.regimes.mean if self.regimes is not None else acceptance_rate
        if not is_number(a, 0.0, 1.0):
            raise ConfigError(f"acceptance_rate must be in [0, 1], got {a!r}")
        if rows is not None and not is_int(rows, 2):
            raise ConfigError(f"a drafter's rows must be an integer >= 2, got {rows!r}")
        self.target = target
        self.acceptance_rate = float(a)  # with regimes, their long-run mean
        self.native_rows = rows or target.vocab_size
        self.vocab_size = self.native_rows  # the width of the rows its servers return
        self.latency = latency if latency is not None else target.latency.scaled(0.1)
        self.seed = seed
        self.h0 = target.h0  # the drafter reads the same prefix as the target
        self._agree_salt = mix64((seed * _GOLD + _AGREE_SALT) & _MASK)
        self._wrong_salt = mix64((seed * _GOLD + _WRONG_SALT) & _MASK)
        self._agree_below = math.ceil(self.acceptance_rate * _TWO64)  # agree iff unit(h, agree salt) < this
        if self.regimes is not None:
            self._regime_below = [math.ceil(r * _TWO64) for r in self.regimes.rates]
        self._plain = self.regimes is None and self.native_rows == target.vocab_size  # greedy_run's fast path

    @property
    def token_count(self) -> int:
        """Its real tokens: its target's that it has rows for (the rest of its rows are padding)."""
        return min(self.native_rows, self.target.vocab_size)

    def with_rows(self, rows: int) -> SimulatedDrafter:
        """This drafter with servers that return rows ``rows`` wide (its padding at probability 0)."""
        fitted = copy.copy(self)
        fitted.vocab_size = rows
        fitted._plain = False
        return fitted

    def rate(self, position: int | None) -> float:
        """The acceptance rate at ``position`` (None: the long-run rate)."""
        if self.regimes is None or position is None:
            return self.acceptance_rate
        return self.regimes.rate_at(position)

    def _below(self, position: int | None) -> int:
        if self.regimes is None or position is None:
            return self._agree_below
        return self._regime_below[self.regimes.regime_at(position)]

    def argmax(self, h: int) -> int:
        return self.disagree(h, self.target.argmax(h))

    def argmax_at(self, h: int, position: int | None) -> int:
        return self.disagree(h, self.target.argmax(h), position)

    def greedy_run(self, h: int, k: int, hashes: list[int], position: int | None = None) -> list[int]:
        """SimulatedLM.greedy_run with argmax, the target's mode and extend written out: a drafter spends most
        of a virtual-clock run here (tests/backends/test_simulated_models.py checks that both give the same tokens)."""
        if not self._plain:
            return SimulatedLM.greedy_run(self, h, k, hashes, position)
        v, below, agree_salt, wrong_salt = self.vocab_size, self._agree_below, self._agree_salt, self._wrong_salt
        tokens = []
        for _ in range(k):
            tok = (h >> 8) % v  # the target's mode (SimulatedModel.argmax)
            if hash((h, agree_salt)) & _MASK >= below:
                tok = (tok + 1 + (hash((h, wrong_salt)) & _MASK) % (v - 1)) % v
            tokens.append(tok)
            h = hash((h, tok))
            hashes.append(h)
        return tokens

    def ranked(self, h: int, k: int, position: int | None = None) -> list[int]:
        """Greedy token trees: candidate 0 is :meth:`argmax`; each later candidate is the target's mode with
        probability a (a fresh hash per rank) unless already listed, else a wrong token not yet listed. So every
        candidate hits with rate a, independently, and k candidates hold the mode with probability 1 - (1 - a)^k."""
        out, m, v = [self.argmax_at(h, position)], self.target.argmax(h), self._sayable()
        below = self._below(position)
        for r in range(1, min(k, v)):
            if m not in out and m < v and unit(h, self._agree_salt ^ (r * _GOLD)) < below:
                out.append(m)
                continue
            wrong = [t for t in range(v) if t not in out and t != m] or [m]
            out.append(wrong[unit(h, self._wrong_salt ^ (r * _GOLD)) % len(wrong)])
        return out

    def candidates(
        self, h: int, k: int, decoding: Decoding, position: int | None = None
    ) -> tuple[list[int], list[float]]:
        """Greedy: :meth:`ranked` with probability a (1 - a)^r for candidate r, the chance that it is the target's
        token (candidates hit independently at rate a). That is all this drafter knows: its greedy hits carry no
        per-position confidence, so best-first trees are the same shape at every position here (a real drafter's
        probabilities vary). Sampling: the top of q, as for any model."""
        if not decoding.greedy:
            return super().candidates(h, k, decoding, position)
        a = self.rate(position)
        tokens = self.ranked(h, k, position)
        return tokens, [a * (1.0 - a) ** r for r in range(len(tokens))]

    def probs(self, h: int, temperature: float = 1.0) -> np.ndarray:
        return self.probs_at(h, temperature, None)

    def probs_at(self, h: int, temperature: float, position: int | None) -> np.ndarray:
        return self._mixed(h, self.target.probs(h, temperature), position)

    def _mixed(self, h: int, p: np.ndarray, position: int | None) -> np.ndarray:
        """q = a p + (1 - a) onehot(z) at prefix hash h, from the target's row ``p`` there, as its servers return it."""
        a = self.rate(position)
        q = a * p
        q[self.target.excluded(h)] += 1.0 - a
        return self._rows(q)

    def _rows(self, q: np.ndarray) -> np.ndarray:
        """q over the target's vocabulary [V] -> the row its servers return [vocab_size] (class docstring)."""
        v, r = len(q), self.native_rows
        if r == v == self.vocab_size:
            return q
        if r > v:
            q = np.concatenate([(1.0 - PADDING_MASS) * q, np.full(r - v, PADDING_MASS / (r - v))])
        elif r < v:
            q = q[:r] / q[:r].sum()
        return fit_probs(q, self.vocab_size)

    def _sayable(self) -> int:
        """Greedy drafts are below this: the target's vocabulary, its own rows and the width it returns allowing."""
        return min(self.target.vocab_size, self.native_rows, self.vocab_size)

    def disagree(self, h: int, mode: int, position: int | None = None) -> int:
        """The greedy drafter's token at h given the target's greedy token ``mode`` there."""
        if unit(h, self._agree_salt) < self._below(position):
            token = mode
        else:
            v = self.target.vocab_size
            token = (mode + 1 + unit(h, self._wrong_salt) % (v - 1)) % v
        return token if self._plain else token % self._sayable()

    def processed_rows(self, hashes, context, start: int, decoding: Decoding):
        """The module docstring's definition over the target's *processed* rows: greedy, the processed target's
        argmax kept with probability a; sampling, q = a p + (1 - a) onehot(z) with p the processed target row
        (processing keeps p(z) = 0, so the acceptance rate stays exactly a)."""
        p = self.target.processed_rows(hashes, context, start, decoding)
        if decoding.greedy:
            return [self.disagree(h, m, start + i) for i, (h, m) in enumerate(zip(hashes, p))]
        return np.stack([self._mixed(h, p[i], start + i) for i, h in enumerate(hashes)])


class GrownDraft(NamedTuple):
    """A best-first DraftTree as grown, for pricing (LatencyProfile.call_ms): a draft of ``k`` passes that fed
    ``extra_tokens`` nodes beyond one per pass."""

    context: Sequence[int]
    k: int
    extra_tokens: int
    kind = "draft"


_names = itertools.count()


def node_hashes_of(tree: TokenTree, root: int, hashes: list[int]) -> list[int]:
    """``hashes`` (of the first nodes of ``tree``) extended to every node: a node's hash is its parent's (``root``,
    the context's, for the root's children) extended by its token."""
    for n in range(len(hashes), len(tree)):
        parent = tree.parents[n]
        hashes.append(hash((hashes[parent] if parent >= 0 else root, tree.tokens[n])))
    return hashes


class SimulatedServer(Server):
    """One instance of a simulated model: a cache of prefix hashes and a latency profile. ``duration_ms(call)``
    (virtual clock), ``compute(call)`` (the result, instantly), ``run(call, cancelled)`` (threads: sleep for the
    duration, interruptible by ``cancelled``, then compute)."""

    def __init__(self, model: SimulatedLM, name: str | None = None):
        self.model = model
        self.latency = model.latency
        self.name = name if name is not None else f"sim{next(_names)}"
        self._tokens: tuple[int, ...] = ()
        self._hashes: list[int] = [model.h0]  # _hashes[i] = hash of _tokens[:i]
        self._lcp_of = (None, 0)  # (context, its common prefix with _tokens), reused by compute
        # a token tree held after _tokens (the last call scored or expanded one): (tree, hash of each node)
        self._tree: tuple[TokenTree, list[int]] | None = None

    def _lcp(self, ctx: Context) -> int:
        seen, lcp = self._lcp_of
        if seen is not ctx:
            held = self._tokens
            # two Contexts of one generation (the usual case): only their drafts differ
            if type(held) is Context and type(ctx) is Context and held.base is ctx.base:
                lcp = shared_base_lcp(held, ctx)
            else:
                lcp = common_prefix_len(held, ctx)
            if self._tree is not None and lcp == len(held):  # the cache also holds the tree's path ctx follows
                lcp += len(self._tree[0].follow(ctx[lcp:]))
            self._lcp_of = (ctx, lcp)
        return lcp

    cached_len = _lcp

    def duration_ms(self, call) -> float:
        lat = self.latency
        if type(call) is DraftTree and isinstance(call.shape, BestFirst):  # priced as grown: its passes and nodes
            _, fed, passes = self._grow(call, self._root_hash(call.context))
            cached = self._lcp(call.context) if lat.cache_matters else 0
            return lat.call_ms(GrownDraft(call.context, passes, len(fed) - (passes - 1)), cached)
        return lat.call_ms(call, self._lcp(call.context) if lat.cache_matters else 0)

    def _sync(self, ctx: Context) -> list[int]:
        lcp = self._lcp(ctx)
        hashes = self._hashes
        if self._tree is not None:  # keep the hashes of the tree path ctx follows, drop the other branches
            tree, node_hashes = self._tree
            held = len(self._tokens)
            del hashes[held + 1 :]
            hashes.extend(node_hashes[n] for n in tree.follow(ctx[held:lcp]))
            self._tree = None
        del hashes[lcp + 1 :]
        h = hashes[-1]
        # the unseen tokens; usually only drafts, read straight from the Context's tail
        new = ctx.tail[lcp - ctx.n :] if type(ctx) is Context and lcp >= ctx.n else ctx[lcp:]
        for t in new:
            h = hash((h, t))  # extend(h, t), inlined: the simulator's innermost loop
            hashes.append(h)
        self._tokens = ctx
        self._lcp_of = (None, 0)
        return hashes

    def compute(self, call):
        ctx = call.context
        hashes = self._sync(ctx)
        model, dec = self.model, call.decoding
        kind = type(call)
        if kind is Score:
            return self._scores(hashes[call.start :], as_context(ctx), call.start, dec)
        if kind is ScoreTree:
            return self._score_tree(call, hashes)
        if kind is DraftTree:
            return self._draft_tree(call, hashes)
        if dec.greedy and not dec.reshapes:  # no rows
            tokens = model.greedy_run(hashes[-1], call.k, hashes, len(ctx))
            self._tokens = ctx + tuple(tokens)
            return Proposal(tokens, None)
        return self._draft(call, hashes)

    def _scores(self, hashes: list[int], context, start: int, dec: Decoding) -> Scores:
        """The rows at the prefixes ``hashes`` (positions start, ...), processed as the decoding asks."""
        model = self.model
        if dec.reshapes or (dec.greedy and dec.logprobs is not None):
            return Scores(start, model.processed_rows(hashes, context, start, dec))
        if dec.greedy:
            return Scores(start, model.argmaxes(hashes))
        return Scores(start, np.stack([model.probs(h, dec.temperature) for h in hashes]))

    def _draft(self, call: Draft, hashes: list[int]) -> Proposal:
        """``call.k`` tokens drafted one at a time, each from its own prefix's row, processed as the decoding asks."""
        ctx, dec, model = as_context(call.context), call.decoding, self.model
        h, tokens, q = hashes[-1], [], []
        for position in range(len(ctx), len(ctx) + call.k):
            if dec.reshapes:
                row = model.processed_rows([h], ctx + tokens, position, dec)[0]
            else:
                row = model.probs_at(h, dec.temperature, position)
            tok = int(row) if dec.greedy else dec.draft(row, position)
            tokens.append(tok)
            q.append(row)
            h = extend(h, tok)
            hashes.append(h)
        self._tokens = ctx + tokens
        return Proposal(tokens, None if dec.greedy else np.stack(q))

    def remote_spec(self):
        """How a Ray actor builds this server: the model's few parameters travel, the cache starts empty."""
        return functools.partial(SimulatedServer, self.model, self.name)

    def _hold_tree(self, ctx, tree: TokenTree, root_hash: int) -> list[int]:
        """Remember ``tree`` after ``ctx`` (as a KV cache holds its nodes); returns each node's hash."""
        node_hashes = node_hashes_of(tree, root_hash, [])
        self._tokens, self._tree = ctx, (tree, node_hashes)
        return node_hashes

    def _score_tree(self, call: ScoreTree, hashes: list[int]) -> Scores:
        """Rows at the root and after every node, from one (priced) pass."""
        node_hashes = self._hold_tree(call.context, call.tree, hashes[-1])
        # trees take no processors: with log-probabilities, the raw rows' log-softmax
        return self._scores([hashes[-1], *node_hashes], None, call.start, call.decoding)

    def _root_hash(self, ctx) -> int:
        """The hash of ``ctx`` (what _sync would end on), without touching the cache."""
        lcp, held = self._lcp(ctx), len(self._tokens)
        if lcp <= held:
            h = self._hashes[lcp]
        else:  # ctx runs into the held tree
            tree, node_hashes = self._tree
            h = node_hashes[tree.follow(ctx[held:lcp])[-1]]
        for t in ctx[lcp:]:
            h = hash((h, t))
        return h

    def _grow(self, call: DraftTree, root: int):
        """specpar.core.trees.grow_best_first on the prefix hashes: (tree, fed, passes)."""
        model, dec, at = self.model, call.decoding, len(call.context)
        fed_hashes: list[int] = []

        def ranked(fed: TokenTree, frontier: list[int], k: int) -> list:
            node_hashes_of(fed, root, fed_hashes)  # the frontier: the nodes fed last
            return [
                model.candidates(fed_hashes[n] if n >= 0 else root, k, dec, at + (fed.depths[n] if n >= 0 else 0))
                for n in frontier
            ]

        return grow_best_first(call.shape, ranked, dec, model.vocab_size, call.source)

    def _draft_tree(self, call: DraftTree, hashes: list[int]) -> TokenTree:
        """SpecInfer's expansion (specpar.core.trees.expand) or best-first growth on the prefix hashes."""
        model, dec, root = self.model, call.decoding, hashes[-1]
        if isinstance(call.shape, BestFirst):
            tree = self._grow(call, root)[0]
            self._hold_tree(call.context, tree, root)
            return tree
        node_hashes: list[int] = []

        def level_rows(tree: TokenTree, frontier: list[int]) -> list:
            node_hashes_of(tree, root, node_hashes)  # the frontier: the nodes the last level added
            at = [node_hashes[n] if n >= 0 else root for n in frontier]
            depth = tree.depths[frontier[0]] if frontier[0] >= 0 else 0
            k, position = call.shape[depth], len(call.context) + depth
            if dec.greedy:
                return [model.ranked(h, k, position) for h in at]
            return [model.probs_at(h, dec.temperature, position) for h in at]

        tree = expand(call.shape, level_rows, dec, len(call.context), call.source)
        self._hold_tree(call.context, tree, root)
        return tree

    def run(self, call, cancelled: threading.Event):
        seconds = self.duration_ms(call) / 1000.0
        if seconds > 0 and cancelled.wait(seconds):
            return None
        return self.compute(call)

    def __repr__(self):
        return f"SimulatedServer({self.name})"
