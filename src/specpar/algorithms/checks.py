"""What a generation refuses up front, before any runtime starts: each check's message says why."""

from __future__ import annotations

import warnings

import numpy as np

from specpar.core.config import SpeculativeConfig
from specpar.core.errors import ConfigError, SpecparWarning
from specpar.core.model import Model, as_model, declares
from specpar.core.query import Query
from specpar.core.trees import check_tree
from specpar.runtimes.base import Pool, latency_of, model_of


def check_model(role: str, source):
    """``source`` as a Model or a Pool of servers; a ConfigError up front for a target or drafter that is neither
    (a model is anything with ``server(name)``: :func:`~specpar.core.model.as_model`)."""
    if isinstance(source, Pool) or declares(source, Model):
        return source
    if not callable(getattr(source, "server", None)):
        raise ConfigError(
            f"the {role} must be a model (e.g. a SimulatedModel, a TransformersModel), a Pool of servers, or a model "
            f"directory; got {type(source).__name__} {source!r:.60}"
        )
    return as_model(source)


def check_context_window(prompt_len: int, max_tokens: int, *sources) -> None:
    """Refuse up front a generation longer than the smallest context window among the models (where they have one;
    None: no model)."""
    models = [model_of(source) for source in sources if source is not None]
    windows = [(m.context_window, m.name or "a model") for m in models if m.context_window is not None]
    window, name = min(windows, default=(None, None))
    if window is not None and prompt_len + max_tokens > window:
        raise ConfigError(
            f"the prompt has {prompt_len} tokens and {max_tokens} new ones are asked for, but {name}'s context window "
            f"is {window} tokens: shorten the prompt or lower max_tokens"
        )


def check_tokens(query: Query, target, *drafters) -> None:
    """Refuse up front a prompt that is not token ids (integers >= 0, at most the target's ``max_token_id`` where it
    has one), a logit_bias for an id past that (each server would refuse it in its first task), and a drafter whose
    rows are not as wide as the target's when sampling (rejection sampling compares distributions over one
    vocabulary; a drafter whose rows differ only by padding has been fitted to the target's width by then:
    :mod:`specpar.backends.vocabulary`)."""
    prompt, decoding = query.prompt, query.decoding
    if isinstance(prompt, (str, bytes)) or not hasattr(prompt, "__len__"):
        raise ConfigError(f"the prompt must be a list of token ids, got {type(prompt).__name__}")
    limit = model_of(target).max_token_id
    for i, t in enumerate(prompt):
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 or (limit is not None and t > limit):
            where = f"integers in [0, {limit}]" if limit is not None else "integers >= 0"
            raise ConfigError(f"the prompt's token ids must be {where}; position {i} holds {t!r}")
    bias = decoding.processors.logit_bias if decoding.processors is not None else ()
    if bias and limit is not None and max(t for t, _ in bias) > limit:
        raise ConfigError(f"logit_bias names token {max(t for t, _ in bias)}: the target's ids are 0 .. {limit}")
    vocab = model_of(target).vocab_size
    if decoding.greedy or vocab is None:
        return
    for d in drafters:
        size = model_of(d).vocab_size
        if size is not None and size != vocab:
            raise ConfigError(
                f"the drafter's vocabulary has {size} tokens but the target's has {vocab}: sampling needs one "
                "vocabulary (greedy decoding does not); a drafter whose rows differ from the target's only by padding "
                "needs with_rows() (transformers models have it)"
            )


def check_drafter_faster(target, drafter) -> None:
    """Warn when the drafter is slower than the target (the paper's Assumption 2)."""
    t, d = latency_of(target), latency_of(drafter)
    if t is None or d is None:
        return
    if d.tpot_ms > t.tpot_ms or d.ttft_ms > t.ttft_ms:
        warnings.warn(
            f"the drafter ({d.tpot_ms:g} ms/token) is slower than the target ({t.tpot_ms:g} ms/token): "
            "DSI's guarantee of never being slower than non-SI needs a drafter at least as fast as the "
            "target (the paper's Assumption 2); results stay lossless",
            SpecparWarning,
            stacklevel=4,
        )


def check_tree_processors(spec: SpeculativeConfig, processors) -> None:
    """Token trees are drafted and verified on raw rows: refuse them with logits processors."""
    if spec.tree is not None and processors is not None:
        raise ConfigError(
            "token trees (tree=) do not take logits processors yet (top_k, top_p, min_p, repetition_penalty): drop "
            "them or the tree"
        )


def check_request(query: Query, spec: SpeculativeConfig, algorithm, target, drafters: list, merged: bool) -> None:
    """Refuse up front what this generation cannot do with these models. algorithm: the registry's entry for
    ``spec.algorithm`` (:class:`~specpar.algorithms.registry.Algorithm`)."""
    check_tokens(query, target, *(drafters if spec.uses_drafter else ()))
    check_context_window(len(query.prompt), query.max_tokens, target, *drafters)
    check_tree_processors(spec, query.decoding.processors)
    merged = merged and spec.uses_drafter  # the n-gram proposer alone drafts with no model
    if merged and spec.tree is None and algorithm.drafts:
        raise ConfigError("several drafters draft only token trees (merge-based): give tree=<k1,...,km>")
    if merged and not drafters and algorithm.drafts:
        raise ConfigError("drafter is an empty list: give at least one drafter to merge")
    if algorithm.drafts and not drafters and spec.uses_drafter:
        what = "a list of drafters, the smallest first (drafter=[M0, M1, ...])" if algorithm.hierarchy else "a drafter"
        raise ConfigError(f"algorithm {spec.algorithm!r} needs {what}")
    window = model_of(target).context_window
    if spec.tree is not None and window is not None:  # a tree no deeper than the context left after the prompt
        check_tree(spec.tree, room=window - len(query.prompt))
