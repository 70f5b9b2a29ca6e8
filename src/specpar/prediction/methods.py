"""Every method's predicted time on a machine, each at its best settings: what ``specpar predict`` prints and what
``algorithm="auto"`` chooses from.

A method is a way to decode (non-SI, SI, DSI, SI and DSI over token trees or with the n-gram proposer) on a runtime;
its settings are the lookahead, the SP degree, DSI's dedicated cursor, the tree's shape. Each setting's time is
:func:`specpar.prediction.simulate.predicted_ms` (the algorithm's own code on the virtual clock with the profile's
costs, at the threads the engine would give its passes: :class:`EngineShape`). The search runs over a small grid
(:func:`families`), every setting on the same sample pairs, so that settings are compared on the same draws.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from specpar.core.config import SpeculativeConfig, parse_proposer
from specpar.core.errors import ConfigError
from specpar.prediction.machine import MachineProfile
from specpar.prediction.simulate import MAX_SIMULATED, MIN_PAIRS, EngineShape, predicted_times, scaled

LOOKAHEADS = tuple(range(1, 9))
QUICK_PAIRS = 2  # the first round's sample pairs per setting
PATIENCE = 2  # a family's search stops after this many longer lookaheads in a row that are no faster
REFINE, REFINE_MAX = 2, 6  # each method's fastest settings of the first round predicted again on the full sample:
QUICK_SPREAD = 0.10  # those within this fraction of its fastest there, at least REFINE, at most REFINE_MAX
CONTEND = 0.05  # methods predicted within this fraction of the fastest are predicted again on the final sample ...
FINAL_TOKENS, FINAL_MAX_PAIRS = 6000, 64  # ... of about this many output tokens, on at most this many pairs
TREES = ("2,1,1", "2,2,1,1", "3,2,1", "best:8")
METHODS = ("nonsi", "si", "dsi", "tree-si", "tree-dsi", "ngram-si", "ngram-dsi")
"""The methods predicted and chosen from. HSD is not one: it needs a list of drafters; with one it is SI."""
NAMES = {
    "nonsi": "non-SI",
    "si": "SI",
    "dsi": "DSI",
    "tree-si": "SI tree",
    "tree-dsi": "DSI tree",
    "ngram-si": "n-gram SI",
    "ngram-dsi": "n-gram DSI",
    "hsd": "HSD",
}


@dataclass(frozen=True)
class Prediction:
    """One configuration's predicted time: ``ms`` for the request (its prefill and every output token);
    ``first_ms``: to its first token (None: not known)."""

    method: str
    spec: SpeculativeConfig
    runtime: str
    threads: int
    ms: float
    first_ms: float | None = None

    @property
    def label(self) -> str:
        """The method and its settings in a few words: "DSI k=3 SP 2", "SI tree 2,2,1", "non-SI"."""
        s, name = self.spec, NAMES[self.method]
        if self.method == "nonsi":
            words = name
        elif self.method.startswith("tree"):
            words = f"{name} {_tree_text(s.tree)}" + (f" SP {s.sp_degree}" if s.algorithm == "dsi" else "")
        else:
            k = s.buffers[-1] if s.algorithm == "hsd" else s.lookahead
            words = f"{name} k={k}" + (f" SP {s.sp_degree}" if s.algorithm == "dsi" else "")
        if s.algorithm == "dsi" and s.dedicated_cursor and s.sp_degree > 1:
            words += " (cursor kept)"
        return words + (" on Ray" if self.runtime == "ray" else "")

    def to_dict(self) -> dict:
        s = self.spec
        return {
            "method": self.method,
            "label": self.label,
            "predicted_ms": self.ms,
            "runtime": self.runtime,
            "threads": self.threads,
            "speculative_config": {
                "algorithm": s.algorithm,
                "lookahead": s.lookahead,
                "sp_degree": s.sp_degree,
                "tree": None if s.tree is None else _tree_text(s.tree),
                "proposer": s.proposer,
                "dedicated_cursor": s.dedicated_cursor,
                "prefill_replicas": s.prefill_replicas,
            },
        }


def _tree_text(tree) -> str:
    return str(tree) if not isinstance(tree, tuple) else ",".join(map(str, tree))


@dataclass
class MethodPredictions:
    """Every method's best setting, fastest first (``best``), and every setting tried (``tried``)."""

    prompt_tokens: int
    max_tokens: int
    best: list[Prediction]
    tried: list[Prediction] = field(default_factory=list)

    @property
    def fastest(self) -> Prediction:
        return self.best[0]

    def of(self, method: str) -> Prediction | None:
        return next((p for p in self.best if p.method == method), None)

    def scaled(self, max_tokens: int) -> MethodPredictions:
        """These predictions (of MAX_SIMULATED output tokens or more) for ``max_tokens`` output tokens, each
        setting's time after its first token in proportion (:func:`specpar.prediction.simulate.scaled`)."""
        if self.max_tokens < min(max_tokens, MAX_SIMULATED):
            raise ConfigError(f"predictions of {self.max_tokens} tokens cannot be scaled to {max_tokens}")

        def one(p: Prediction) -> Prediction:
            return replace(p, ms=scaled(p.ms, p.first_ms, self.max_tokens, max_tokens))

        best = sorted(map(one, self.best), key=lambda p: p.ms)
        return MethodPredictions(self.prompt_tokens, max_tokens, best, [one(p) for p in self.tried])


def available(profile: MachineProfile, shape: EngineShape, methods: Iterable[str] = METHODS) -> list[str]:
    """The methods this profile can predict and this engine can run (a drafter and its rate, n-gram rates)."""
    with_model = profile.drafter is not None and profile.acceptance_rate is not None and shape.drafter
    ngram = {"match_rate", "acceptance_rate"} <= set(profile.ngram)
    out = []
    for m in methods:
        if m not in METHODS:
            raise ConfigError(f"unknown method {m!r}: the methods are {', '.join(METHODS)}")
        if m == "nonsi" or (m.startswith("ngram") and ngram) or (not m.startswith("ngram") and with_model):
            out.append(m)
    return out


def families(method: str, targets: int, lookaheads: Sequence[int] = LOOKAHEADS,
             dsi: tuple[int, bool] | None = None) -> list[list[SpeculativeConfig]]:  # fmt: skip
    """The settings of ``method`` searched on ``targets`` target servers, in families: one per SP degree and cursor
    mode, lookaheads increasing. Token trees with DSI are tried at ``dsi``'s (SP degree, cursor): chain DSI's best."""
    modes = [(sp, c) for sp in range(1, targets + 1) for c in ((False, True) if sp > 1 else (False,))]
    if method == "nonsi":
        return [[SpeculativeConfig(algorithm="nonsi")]]
    if method in ("si", "ngram-si"):
        return [[SpeculativeConfig(algorithm="si", lookahead=k, proposer=_ngram(method)) for k in lookaheads]]
    if method in ("dsi", "ngram-dsi"):
        dsi_at = partial(SpeculativeConfig, algorithm="dsi", prefill_replicas=True, proposer=_ngram(method))
        return [[dsi_at(lookahead=k, sp_degree=sp, dedicated_cursor=c) for k in lookaheads] for sp, c in modes]
    if method == "tree-si":
        return [[SpeculativeConfig(algorithm="si", tree=t)] for t in TREES]
    if method == "tree-dsi":
        sp, c = dsi or (targets, False)
        return [[SpeculativeConfig(algorithm="dsi", tree=t, sp_degree=sp, dedicated_cursor=c, prefill_replicas=True)]
                for t in TREES]  # fmt: skip
    raise ConfigError(f"no search of {method!r}")


def _ngram(method: str) -> str | None:
    """The proposer a method names: "ngram" for the n-gram methods, else None (the drafter model)."""
    return "ngram" if method.startswith("ngram") else None


def predict_methods(profile: MachineProfile, prompt_tokens: int, max_tokens: int, shape: EngineShape | None = None,
                    methods: Iterable[str] = METHODS, runtimes: Sequence[str] | None = None) -> MethodPredictions:  # fmt: skip
    """Each of ``methods`` (those :func:`available`) at its fastest setting for a prompt of ``prompt_tokens`` tokens
    and ``max_tokens`` output tokens, on each of ``runtimes`` (default: the shape's), fastest first.

    Three rounds: each family (:func:`families`) on QUICK_PAIRS pairs until PATIENCE settings in a row are no faster
    (:func:`_search`); each method's fastest on the full sample (:func:`_refine`); those within CONTEND of the fastest
    on a larger one (:func:`_settle`). A method's time is its best setting's in the last round it reached."""
    shape = shape or EngineShape()
    if prompt_tokens < 1 or max_tokens < 1:
        raise ConfigError(f"a prediction needs a prompt and an output of at least one token, got {prompt_tokens} "
                          f"and {max_tokens}")  # fmt: skip
    tried: dict[tuple, list[Prediction]] = {}
    for runtime in runtimes or (shape.runtime,):
        on = replace(shape, runtime=runtime)
        for method in sorted(available(profile, on, methods), key=lambda m: m == "tree-dsi"):  # after chain DSI
            chain = min(tried.get(("dsi", runtime), ()), key=lambda p: p.ms, default=None)
            dsi = None if chain is None else (chain.spec.sp_degree, chain.spec.dedicated_cursor)
            tried[method, runtime] = [
                p
                for family in families(method, on.targets, _lookaheads(max_tokens), dsi)
                for p in _search(profile, method, family, on, prompt_tokens, max_tokens)
            ]
    refined = [p for (_, runtime), quick in tried.items()
               for p in _refine(profile, quick, replace(shape, runtime=runtime), prompt_tokens, max_tokens)]  # fmt: skip
    best: dict[tuple, Prediction] = {}
    for p in _settle(profile, refined, shape, prompt_tokens, max_tokens):
        if (p.method, p.runtime) not in best or p.ms < best[p.method, p.runtime].ms:
            best[p.method, p.runtime] = p
    return MethodPredictions(prompt_tokens, max_tokens, sorted(best.values(), key=lambda p: p.ms),
                             [p for ps in tried.values() for p in ps])  # fmt: skip


def _refine(profile, quick: list[Prediction], shape: EngineShape, prompt_tokens: int, max_tokens: int):
    """A method's fastest settings of the first round (within QUICK_SPREAD of its fastest, at least REFINE and at
    most REFINE_MAX: two pairs tell settings apart only roughly), predicted again on the full sample."""
    if len(quick) == 1:
        return quick
    ranked = sorted(quick, key=lambda p: p.ms)
    close = [p for p in ranked if p.ms <= ranked[0].ms * (1 + QUICK_SPREAD)]
    kept = ranked[: min(REFINE_MAX, max(REFINE, len(close)))]
    return [_predict(profile, p.method, p.spec, shape, prompt_tokens, max_tokens) for p in kept]


def _settle(profile, refined: list[Prediction], shape: EngineShape, prompt_tokens: int, max_tokens: int):
    """The settings within CONTEND of the fastest (of any method) predicted again on the final sample (FINAL_TOKENS
    output tokens in all) until every one within CONTEND has been: a choice among close ones rests on the most
    draws, never comparing a final estimate with a rougher one."""
    pairs = max(MIN_PAIRS, min(FINAL_MAX_PAIRS, FINAL_TOKENS // max(1, min(max_tokens, MAX_SIMULATED))))
    out, settled = list(refined), {i for i, p in enumerate(refined) if p.method == "nonsi"}
    while True:
        fastest = min(p.ms for p in out)
        close = [i for i, p in enumerate(out) if i not in settled and p.ms <= fastest * (1 + CONTEND)]
        if not close:
            return out
        for i in close:
            p = out[i]
            out[i] = _predict(profile, p.method, p.spec, replace(shape, runtime=p.runtime), prompt_tokens, max_tokens,
                              pairs)  # fmt: skip
            settled.add(i)


def _search(profile, method: str, family: list[SpeculativeConfig], shape: EngineShape, prompt_tokens: int,
            max_tokens: int) -> list[Prediction]:  # fmt: skip
    """A family's settings in order on QUICK_PAIRS pairs, until PATIENCE in a row are no faster than the best."""
    out, best, worse = [], None, 0
    for spec in family:
        p = _predict(profile, method, spec, shape, prompt_tokens, max_tokens, QUICK_PAIRS)
        out.append(p)
        if best is None or p.ms < best.ms:
            best, worse = p, 0
        else:
            worse += 1
            if worse >= PATIENCE:
                break
    return out


def _predict(profile, method: str, spec: SpeculativeConfig, shape: EngineShape, prompt_tokens: int, max_tokens: int,
             pairs: int | None = None) -> Prediction:  # fmt: skip
    ms, first = predicted_times(profile, spec, prompt_tokens, max_tokens, shape, pairs=pairs)
    return Prediction(method, spec, shape.runtime, shape.threads(profile, spec), ms, first)


def _lookaheads(max_tokens: int) -> tuple[int, ...]:
    """The lookaheads worth trying for an output of ``max_tokens`` tokens (a draft past the end is cut)."""
    return tuple(k for k in LOOKAHEADS if k < max(2, max_tokens))


def method_of(spec: SpeculativeConfig) -> str:
    """The method (a key of NAMES) a resolved configuration runs."""
    if spec.algorithm in ("nonsi", "hsd"):
        return spec.algorithm
    if spec.algorithm not in ("si", "dsi"):
        raise ConfigError(f"no prediction of algorithm {spec.algorithm!r}")
    if spec.proposer is not None and parse_proposer(spec.proposer).ngram:
        return f"ngram-{spec.algorithm}"
    return f"tree-{spec.algorithm}" if spec.tree is not None else spec.algorithm
