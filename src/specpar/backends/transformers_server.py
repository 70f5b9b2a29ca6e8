"""A server over a transformers causal LM: one KV cache, reused across calls, cropped on divergence.

The server remembers which tokens its cache holds (``tokens``). A call carries
the whole context; the server keeps the longest common prefix of the two, crops
the cache to it, and runs one forward pass over only the tokens it has not seen:

* ``Score(context, n)``: the rows for positions len(context)-n .. len(context)
  are the logits at input indices len(context)-n-1 .. len(context)-1, so the
  pass covers at least those n+1 inputs. Verifying k drafts is one forward pass.
* ``Draft(context, k)``: one pass over the unseen tail of the context, then one
  pass per drafted token; ``cancelled`` is checked between passes, and the
  cache stays consistent whenever it stops (``tokens`` records what it holds).
* ``ScoreTree(context, tree)``: one pass over the unseen tail of the context and every node of the token tree,
  with a 4D attention mask (a node attends to the context and its own ancestors) and position ids
  len(context) + depth - 1. ``DraftTree``: one such pass per level of the expansion.
  The cache then holds the tree's nodes after ``tokens``; the next call keeps the keys and values of the path
  its context follows and drops every other branch (an index gather on each layer), so it continues exactly as
  if that path had been fed alone.

Rows follow :class:`specpar.core.calls.Scores`: argmax ids when greedy, float64
probability rows softmax(logits / T) when sampling. Drafts are sampled with the
position-keyed uniforms of :mod:`specpar.core.decoding`, so a drafted token does not
depend on which thread drafted it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import numpy as np

from specpar.backends.cached_server import CachedServer
from specpar.core.calls import DraftTree, Scores, ScoreTree, as_context
from specpar.core.decoding import Decoding
from specpar.core.errors import ConfigError, stop_if_cancelled
from specpar.core.logits_processors import rows
from specpar.core.prefix import common_prefix_len
from specpar.core.trees import BestFirst, TokenTree, expand, grow_best_first, tree_depth

UNREADABLE_AS = 0  # what a fitted drafter reads for an id beyond its embedding (any id keeps drafting lossless)


def fit_width(logits, width: int):
    """Logits [n, V] as [n, width]: columns beyond ``width`` dropped, missing ones added at -inf (probability 0)."""
    import torch

    n = logits.shape[-1]
    if n >= width:
        return logits[:, :width]
    return torch.cat([logits, logits.new_full((logits.shape[0], width - n), -torch.inf)], dim=-1)


class TransformersServer(CachedServer):
    """One instance of a model (a :class:`~specpar.backends.transformers_model.TransformersModel`, which makes
    its servers: this module does not import it) on one device, with its own KV cache.

    Several servers of one model on one device share the weights (one module);
    only their caches are separate. One call at a time, reset, the forward account: :class:`CachedServer`.
    """

    def __init__(self, model, name: str, device: str):
        super().__init__(name)
        self.model = model
        self.device = device
        self.module = model.module_on(device)
        self.latency = model.latency
        # a drafter fitted to its target's width (specpar.backends.vocabulary): rows cut or widened to it, and ids
        # beyond its embedding (the target's padding ids, which no text maps to) read as UNREADABLE_AS
        self.width = model.vocab_size
        self.fitted = self.width != model.native_rows
        self.readable = model.embedding_rows
        self._cache = None
        self._tree: tuple[TokenTree, int] | None = None  # a token tree whose first n nodes the cache holds after tokens

    # -- the cache ---------------------------------------------------------------------------
    def _clear(self) -> None:
        self._cache, self.tokens, self._tree = None, (), None

    def _settle_tree(self, context) -> None:
        """Keep the cached tree nodes on the path ``context`` follows (after ``tokens``), drop the other branches."""
        tree, n = self._tree
        self._tree = None
        held = len(self.tokens)
        path = []
        if len(context) > held and tuple(context[:held]) == self.tokens:
            path = [x for x in tree.follow(context[held:]) if x < n]
        import torch

        keep = torch.tensor([*range(held), *(held + x for x in path)], dtype=torch.long, device=self.device)
        for layer in self._cache.layers:
            layer.keys = layer.keys.index_select(-2, keep)
            layer.values = layer.values.index_select(-2, keep)
        self.tokens += tuple(tree.tokens[x] for x in path)

    def _crop(self, keep: int) -> None:
        """Keep the first ``keep`` cached tokens, drop the rest."""
        if keep >= len(self.tokens):
            return
        if keep == 0:
            self._clear()
            return
        self._cache.crop(keep - len(self.tokens))  # transformers 5: a negative count of tokens to remove
        self.tokens = self.tokens[:keep]

    def _forward(self, new: Sequence[int], tree: TokenTree | None = None, lo: int = 0, hi: int = 0):
        """Run ``new`` tokens after the cached ones, then (tree attention) nodes lo .. hi-1 of ``tree``, whose
        nodes 0 .. lo-1 the cache already holds after ``tokens``; returns the logits [len(new) + hi - lo, V]."""
        import torch
        from transformers import DynamicCache

        if self._cache is None:
            self._cache = DynamicCache(config=self.module.config)
        ids = [*new, *tree.tokens[lo:hi]] if tree is not None else list(new)
        if self.fitted:
            ids = [t if t < self.readable else UNREADABLE_AS for t in ids]
        ids = torch.tensor([ids], device=self.device)
        kw = {} if tree is None else self._tree_inputs(len(new), tree, lo, hi)
        t0 = time.perf_counter()
        out = self.module(input_ids=ids, cache=self._cache, use_cache=True, **kw)  # transformers >= 5.24: cache=
        logits = out.logits[0] if not self.fitted else fit_width(out.logits[0], self.width)
        self._passed(t0, time.perf_counter())
        self.tokens += tuple(new)
        if tree is not None:
            self._tree = (tree, hi)
        return logits

    def _tree_inputs(self, a: int, tree: TokenTree, lo: int, hi: int) -> dict:
        """The 4D additive attention mask [1, 1, a + hi - lo, len(tokens) + a + hi] and position ids for ``a``
        linear tokens followed by tree nodes lo .. hi-1: linear tokens are causal; a node sees the linear part
        and its ancestors (itself included), at position (linear length) + depth - 1."""
        import torch

        held = len(self.tokens)
        linear = held + a
        allowed = np.zeros((a + hi - lo, linear + hi), dtype=bool)
        allowed[:a, :held] = True
        allowed[:a, held:linear] = np.tril(np.ones((a, a), dtype=bool))
        allowed[a:, :linear] = True
        allowed[a:, linear:] = tree.ancestors()[lo:hi, :hi] if hi else allowed[a:, linear:]
        dtype = self.module.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype)
        mask[~torch.from_numpy(allowed)] = torch.finfo(dtype).min
        positions = [*range(held, linear), *(linear + d - 1 for d in tree.depths[lo:hi])]
        return {
            "attention_mask": mask[None, None].to(self.device),
            "position_ids": torch.tensor([positions], device=self.device),
        }

    def _sync(self, context: tuple[int, ...], need_from: int, decoding=None):
        """Bring the cache to ``context`` and return logits for input indices need_from .. len(context)-1."""
        if len(context) > self.model.context_window:
            raise ConfigError(
                f"context of {len(context)} tokens exceeds {self.model.name}'s context window of "
                f"{self.model.context_window} tokens: shorten the prompt or lower max_tokens"
            )
        if self._tree is not None:
            self._settle_tree(context)
        keep = min(common_prefix_len(self.tokens, context), need_from)
        self._crop(keep)
        return self._forward(context[keep:])[need_from - keep :]

    # -- rows ----------------------------------------------------------------------------------
    @staticmethod
    def _softmax(logits, temperature: float):
        """softmax(logits / T) in float64 as a tensor, [..., V]: the logits shifted by their maximum first, so that
        none overflows however small T (specpar.core.logits_processors.scaled)."""
        import torch

        z = logits.double()
        return torch.softmax((z - z.amax(dim=-1, keepdim=True)) / temperature, dim=-1)

    @classmethod
    def _probs(cls, logits, temperature: float) -> np.ndarray:
        """softmax(logits / T) in float64: [n, V] -> [n, V] numpy."""
        return cls._softmax(logits, temperature).cpu().numpy()

    def _rows(self, logits, decoding: Decoding, context, start: int):
        """Rows for positions start .. (prefixes context[:start + i]) from logits [n, V]; a request's logits
        processors go through the one implementation every server shares (specpar.core.logits_processors)."""
        if decoding.reshapes or (decoding.greedy and decoding.logprobs is not None):  # log-probabilities: Scores
            return rows(logits.double().cpu().numpy(), context, start, decoding)
        if decoding.greedy:
            return logits.argmax(dim=-1).tolist()
        return self._probs(logits, decoding.temperature)

    # -- the contract --------------------------------------------------------------------------
    def _inside_call(self):
        import torch

        return torch.inference_mode()

    def _last_logits(self, ctx, cancelled, decoding=None):
        return self._sync(ctx, len(ctx) - 1)[-1]

    def _draft_row(self, logits, dec: Decoding, ctx, tokens: list[int], position: int):
        if dec.reshapes:
            return self._rows(logits[None], dec, as_context(ctx) + tokens, position)[0]
        if dec.greedy:
            return int(logits.argmax())
        return self._probs(logits, dec.temperature)

    def _next_logits(self, token: int):
        return self._forward([token])[-1]

    def _score_tree(self, call: ScoreTree) -> Scores:
        """Rows at the root and after every node of the tree, from one forward pass with tree attention."""
        ctx, tree = call.context, call.tree
        self._check_window(len(ctx) + tree.depth)
        if self._tree is not None:
            self._settle_tree(ctx)
        keep = min(common_prefix_len(self.tokens, ctx), len(ctx) - 1)
        self._crop(keep)
        logits = self._forward(ctx[keep:], tree, 0, len(tree))
        # trees take no logits processors (refused in generate), so rows need no context
        return Scores(call.start, self._rows(logits[len(ctx) - keep - 1 :], call.decoding, None, call.start))

    def _draft_tree(self, call: DraftTree, cancelled) -> TokenTree:
        """SpecInfer's expansion (specpar.core.trees.expand): one forward pass per level over that level's new nodes."""
        import torch

        ctx, dec = call.context, call.decoding
        self._check_window(len(ctx) + tree_depth(call.shape))
        logits = self._sync(ctx, len(ctx) - 1)[-1:]
        if isinstance(call.shape, BestFirst):
            return self._grow(call, logits, cancelled)

        def level_rows(tree: TokenTree, frontier: list[int]) -> list:
            nonlocal logits
            if frontier[0] >= 0:  # the frontier is the nodes the last level added, in order
                stop_if_cancelled(cancelled)
                logits = self._forward((), tree, frontier[0], len(tree))
            if dec.greedy:
                k = call.shape[tree.depths[frontier[0]] if frontier[0] >= 0 else 0]
                return torch.topk(logits, min(k, logits.shape[-1]), dim=-1).indices.tolist()
            return list(self._probs(logits, dec.temperature))

        return expand(call.shape, level_rows, dec, len(ctx), call.source)

    def _grow(self, call: DraftTree, logits, cancelled) -> TokenTree:
        """Best-first growth (specpar.core.trees.grow_best_first) from the root's logits [1, V]: one forward pass per
        step over the nodes it expands (the cache holds every node fed; the next call keeps the path it follows)."""
        import torch

        dec = call.decoding
        temperature = 1.0 if dec.greedy else dec.temperature  # greedy ranks by the drafter's own probabilities

        def ranked(fed: TokenTree, frontier: list[int], k: int) -> list:
            nonlocal logits
            if frontier[0] >= 0:
                stop_if_cancelled(cancelled)
                logits = self._forward((), fed, frontier[0], len(fed))
            top = torch.topk(self._softmax(logits, temperature), min(k, logits.shape[-1]), dim=-1)
            return list(zip(top.indices.tolist(), top.values.tolist()))

        return grow_best_first(call.shape, ranked, dec, logits.shape[-1], call.source)[0]

    def _check_window(self, length: int) -> None:
        if length > self.model.context_window:
            raise ConfigError(
                f"a token tree reaching position {length} exceeds {self.model.name}'s context window of "
                f"{self.model.context_window} tokens: use a shallower tree or a shorter prompt"
            )

    def cached_len(self, context) -> int:
        n = common_prefix_len(self.tokens, context)
        if self._tree is not None and n == len(self.tokens):
            tree, held = self._tree
            n += sum(1 for x in tree.follow(context[n:]) if x < held)
        return n

    def remote_spec(self):
        """How a Ray actor builds this server: it calls the model's ``factory`` (which loads or builds the model in
        the actor's process: weights never travel), then makes a server of the same name there."""
        factory = self.model.factory
        if factory is None:
            raise ConfigError(
                f"{self.model.name} was built from a module in memory, so a Ray actor cannot build its own copy: "
                "load it from a directory, or give TransformersModel(..., factory=f) a picklable function f that "
                "returns the model"
            )
        return functools.partial(build_server, factory, self.name, self.device)

    def __repr__(self) -> str:
        return f"TransformersServer({self.name} on {self.device})"


def build_server(factory, name: str, device: str) -> TransformersServer:
    """A server named ``name`` of the model ``factory()`` returns (in a Ray actor), on ``device``; a CUDA device
    becomes the actor's own GPU (Ray shows it the one it was given, as cuda:0), or the CPU if it has none."""
    if device.startswith("cuda"):
        import torch

        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    return factory().server(name, device)
