"""A server over a transformers causal LM: one KV cache, reused across calls, cropped on divergence.

A call carries the whole context; the server keeps the longest common prefix of it and the cached ``tokens``, crops
the cache there and feeds only the rest (:class:`~specpar.backends.cached_server.CachedServer` says which rows each
call returns). Token trees are fed with a 4D attention mask (a node attends to the context and its own ancestors)
and position ids len(context) + depth - 1; the cache then holds the tree's nodes after ``tokens``, and the next call
keeps the keys and values of the path its context follows (an index gather on each layer), so it continues exactly
as if that path had been fed alone.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Sequence

import numpy as np

from specpar.backends.cached_server import CachedServer
from specpar.core.decoding import Decoding
from specpar.core.errors import ConfigError
from specpar.core.logits_processors import rows
from specpar.core.prefix import common_prefix_len
from specpar.core.trees import TokenTree

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

    def _keep(self, context, limit: int) -> int:
        """Cut the cache to what it shares with ``context``, at most ``limit`` tokens; returns how many it holds."""
        if self._tree is not None:
            self._settle_tree(context)
        keep = min(common_prefix_len(self.tokens, context), limit)
        self._crop(keep)
        return keep

    def _sync(self, context: tuple[int, ...], need_from: int, decoding=None, cancelled=None):
        """Bring the cache to ``context`` and return logits for input indices need_from .. len(context)-1."""
        if len(context) > self.model.context_window:
            raise ConfigError(
                f"context of {len(context)} tokens exceeds {self.model.name}'s context window of "
                f"{self.model.context_window} tokens: shorten the prompt or lower max_tokens"
            )
        keep = self._keep(context, need_from)
        return self._forward(context[keep:])[need_from - keep :]

    # -- rows ----------------------------------------------------------------------------------
    @staticmethod
    def _probs(logits, temperature: float) -> np.ndarray:
        """softmax(logits / T) in float64, [n, V] -> [n, V] numpy: the logits shifted by their maximum first, so
        that none overflows however small T (specpar.core.logits_processors.scaled)."""
        import torch

        z = logits.double()
        return torch.softmax((z - z.amax(dim=-1, keepdim=True)) / temperature, dim=-1).cpu().numpy()

    @staticmethod
    def _top(rows, k: int) -> list[list[int]]:
        """The ``k`` largest entries' ids of each row of ``rows`` [n, V] (a tensor or an array), largest first."""
        import torch

        return torch.as_tensor(rows).topk(min(k, rows.shape[-1]), dim=-1).indices.tolist()

    def _rows(self, logits, decoding: Decoding, context, start: int):
        """Rows for positions start .. (prefixes context[:start + i]) from logits [n, V]; a request's logits
        processors go through the one implementation every server shares (specpar.core.logits_processors)."""
        if decoding.reshapes or (decoding.greedy and decoding.logprobs is not None):  # log-probabilities: Scores
            return rows(logits.double().cpu().numpy(), context, start, decoding)
        if decoding.greedy:
            return logits.argmax(dim=-1).tolist()
        return self._probs(logits, decoding.temperature)

    # -- the contract (run, the draft loops: CachedServer) ----------------------------------------------
    def _inside_call(self):
        import torch

        return torch.inference_mode()

    def _next_logits(self, token: int):
        return self._forward([token])

    def _feed_whole_tree(self, ctx, tree: TokenTree, decoding):
        """The logits of ``ctx``'s last token and every node of ``tree``, [1 + len(tree), V], from one pass."""
        keep = self._keep(ctx, len(ctx) - 1)
        return self._forward(ctx[keep:], tree, 0, len(tree))[len(ctx) - keep - 1 :]

    def _growing_tree(self, n_context: int):
        """The cache holds every node fed; the next call keeps the path it follows."""
        return contextlib.nullcontext()

    def _feed_level(self, growing, tree: TokenTree, lo: int, cancelled):
        """The logits of nodes lo .. of ``tree``, fed now after the nodes before them."""
        return self._forward((), tree, lo, len(tree))

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
