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

Rows follow :class:`specpar.calls.Scores`: argmax ids when greedy, float64
probability rows softmax(logits / T) when sampling. Drafts are sampled with the
position-keyed uniforms of :mod:`specpar.decoding`, so a drafted token does not
depend on which thread drafted it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import numpy as np

from specpar.calls import Draft, Proposal, Score, Scores, as_context
from specpar.decoding import Decoding
from specpar.errors import ConfigError
from specpar.logits_processors import rows
from specpar.models.prefix import common_prefix_len


class TransformersServer:
    """One instance of a model (a :class:`~specpar.models.transformers_model.TransformersModel`, which makes
    its servers: this module does not import it) on one device, with its own KV cache.

    Several servers of one model on one device share the weights (one module);
    only their caches are separate. Implements the runtime's server contract.

    forward_s: seconds spent inside forward passes so far; forward_log: their (start, end)
        perf_counter times, for the time a generation spends outside forward passes.
    """

    def __init__(self, model, name: str, device: str):
        self.model = model
        self.name = name
        self.device = device
        self.module = model.module_on(device)
        self.latency = model.latency
        self.forward_s = 0.0
        self.forward_log: list[tuple[float, float]] = []
        self.forwards = 0
        self.tokens: tuple[int, ...] = ()  # the tokens whose keys and values the cache holds
        self._cache = None

    # -- the cache ---------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything cached (the next call is a prefill)."""
        self._cache, self.tokens = None, ()

    def _crop(self, keep: int) -> None:
        """Keep the first ``keep`` cached tokens, drop the rest."""
        if keep >= len(self.tokens):
            return
        if keep == 0:
            self.reset()
            return
        self._cache.crop(keep - len(self.tokens))  # transformers 5: a negative count of tokens to remove
        self.tokens = self.tokens[:keep]

    def _forward(self, new: Sequence[int]):
        """Run ``new`` tokens after the cached ones; returns their logits [len(new), V] (a torch tensor)."""
        import torch
        from transformers import DynamicCache

        if self._cache is None:
            self._cache = DynamicCache(config=self.module.config)
        ids = torch.tensor([list(new)], dtype=torch.long, device=self.device)
        t0 = time.perf_counter()
        out = self.module(input_ids=ids, past_key_values=self._cache, use_cache=True)
        logits = out.logits[0]
        t1 = time.perf_counter()
        self.forward_s += t1 - t0
        self.forward_log.append((t0, t1))
        self.forwards += 1
        self.tokens += tuple(new)
        return logits

    def _sync(self, context: tuple[int, ...], need_from: int):
        """Bring the cache to ``context`` and return logits for input indices need_from .. len(context)-1."""
        if len(context) > self.model.context_window:
            raise ConfigError(
                f"context of {len(context)} tokens exceeds {self.model.name}'s context window of "
                f"{self.model.context_window} tokens: shorten the prompt or lower max_new_tokens"
            )
        keep = min(common_prefix_len(self.tokens, context), need_from)
        self._crop(keep)
        return self._forward(context[keep:])[need_from - keep :]

    # -- rows ----------------------------------------------------------------------------------
    @staticmethod
    def _probs(logits, temperature: float) -> np.ndarray:
        """softmax(logits / T) in float64: [n, V] -> [n, V] numpy."""
        import torch

        return torch.softmax(logits.double() / temperature, dim=-1).cpu().numpy()

    def _rows(self, logits, decoding: Decoding, context, start: int):
        """Rows for positions start .. (prefixes context[:start + i]) from logits [n, V]; a request's logits
        processors go through the one implementation every server shares (specpar.logits_processors)."""
        if decoding.reshapes:
            return rows(logits.double().cpu().numpy(), context, start, decoding)
        if decoding.greedy:
            return logits.argmax(dim=-1).tolist()
        return self._probs(logits, decoding.temperature)

    # -- the contract --------------------------------------------------------------------------
    def run(self, call, cancelled=None):
        """The result of ``call`` from real forward passes; None when ``cancelled`` was set mid-draft."""
        import torch

        with torch.inference_mode():
            if type(call) is Score:
                return self._score(call)
            if type(call) is Draft:
                return self._draft(call, cancelled)
        raise TypeError(f"unknown call {call!r}")

    def compute(self, call):
        """The result of ``call`` at once (virtual clock)."""
        return self.run(call, None)

    def _score(self, call: Score) -> Scores:
        ctx = call.context
        logits = self._sync(ctx, len(ctx) - call.n_drafts - 1)
        return Scores(call.start, self._rows(logits, call.decoding, ctx, call.start))

    def _draft(self, call: Draft, cancelled) -> Proposal | None:
        ctx, dec = call.context, call.decoding
        logits = self._sync(ctx, len(ctx) - 1)[-1]
        tokens, q = [], []
        for i in range(call.k):
            if dec.reshapes:
                row = self._rows(logits[None], dec, as_context(ctx) + tokens, len(ctx) + i)[0]
            elif not dec.greedy:
                row = self._probs(logits, dec.temperature)
            if dec.greedy:
                token = row if dec.reshapes else int(logits.argmax())
            else:
                token = dec.draft(row, len(ctx) + i)
                q.append(row)
            tokens.append(token)
            if i + 1 < call.k:
                if cancelled is not None and cancelled.is_set():
                    return None
                logits = self._forward([token])[-1]
        return Proposal(tokens, None if dec.greedy else np.stack(q))

    def cached_len(self, context) -> int:
        return common_prefix_len(self.tokens, context)

    def remote_spec(self):
        """How a Ray actor builds this server: it calls the model's ``factory`` (which loads or builds the model in
        the actor's process: weights never travel), then makes a server of the same name there."""
        factory = getattr(self.model, "factory", None)
        if factory is None:
            raise ConfigError(
                f"{self.model.name} was built from a module in memory, so a Ray actor cannot build its own copy: "
                "load it from a directory, or give TransformersModel(..., factory=f) a picklable function f that "
                "returns the model"
            )
        return functools.partial(build_server, factory, self.name, self.device)

    def duration_ms(self, call) -> float:
        """Predicted time of ``call`` from the model's measured latency profile (virtual clock)."""
        lat = self.latency
        if lat is None:
            raise ConfigError(
                f"{self.model.name} has no latency profile, so the virtual clock cannot time it: run real models on "
                "the threads runtime, or measure a profile with `specpar profile` and give it as latency="
            )
        return lat.call_ms(call, common_prefix_len(self.tokens, call.context) if lat.cache_matters else 0)

    def __repr__(self) -> str:
        return f"TransformersServer({self.name} on {self.device})"


def build_server(factory, name: str, device: str) -> TransformersServer:
    """A server named ``name`` of the model ``factory()`` returns (in a Ray actor), on ``device``; a CUDA device
    becomes the actor's own GPU (Ray shows it the one it was given, as cuda:0), or the CPU if it has none."""
    if device.startswith("cuda"):
        import torch

        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    return factory().server(name, device)
