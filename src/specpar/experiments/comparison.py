"""Run non-SI, SI and DSI side by side on the same models and summarize them (latency, speedups, acceptance)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from specpar.core.results import GenerationResult
from specpar.experiments.loop import Speedup, run_arms, speedup
from specpar.experiments.runs import run_once


@dataclass
class AlgorithmSummary:
    """One algorithm over all repeats. Times in ms; speedups as :func:`specpar.experiments.loop.speedup` defines them
    (mean baseline time / mean time over the same repeats, with the per-repeat spread)."""

    algorithm: str
    lookahead: int | None
    sp_degree: int
    time_ms: list[float] = field(default_factory=list)
    acceptance_rate: float = math.nan
    mean_acceptance_length: float = math.nan
    mean_run_length: float = math.nan
    target_forwards: float = 0.0
    drafter_forwards: float = 0.0
    vs_nonsi: Speedup | None = None
    vs_si: Speedup | None = None
    same_tokens_as_nonsi: bool | None = None
    first_run: GenerationResult | None = field(default=None, repr=False)  # repeat 0, e.g. for a timeline plot

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("first_run", "vs_nonsi", "vs_si")}
        d.update(
            mean_ms=statistics.fmean(self.time_ms),
            std_ms=statistics.stdev(self.time_ms) if len(self.time_ms) > 1 else 0.0,
            speedup_vs_nonsi=self.vs_nonsi.value if self.vs_nonsi else math.nan,
            speedup_vs_si=self.vs_si.value if self.vs_si else math.nan,
            speedup_vs_nonsi_spread=self.vs_nonsi.to_dict() if self.vs_nonsi else None,
            speedup_vs_si_spread=self.vs_si.to_dict() if self.vs_si else None,
        )
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def compare(
    make_models: Callable[[int], tuple],
    make_prompt: Callable[[int], Sequence[int]],
    *,
    lookahead: int | Mapping[str, int],
    repeats: int = 1,
    seed: int = 0,
    algorithms: Iterable[str] = ("nonsi", "si", "dsi"),
    progress: Callable[[str], None] | None = None,
    **run,
) -> dict[str, AlgorithmSummary]:
    """Run each algorithm ``repeats`` times, interleaved (:func:`~specpar.experiments.loop.run_arms`), repeat r on
    models ``make_models(seed + r)`` -> (target, drafter) and prompt ``make_prompt(seed + r)`` -> token ids.

    lookahead: one for every algorithm, or one per algorithm ({"si": 6, "dsi": 2}). progress: called with each
    algorithm's name when a run ends. run: each run's :func:`~specpar.experiments.runs.run_once` keywords; ``tree``
    (a token tree <k1, ..., km>): SI and DSI also run over it, as "si-tree" and "dsi-tree".
    """
    tree = run.pop("tree", None)
    algorithms = list(algorithms)
    if tree is not None:
        algorithms += [f"{a}-tree" for a in ("si", "dsi") if a in algorithms]

    def setup(r):
        target, drafter = make_models(seed + r)
        return r, target, drafter, make_prompt(seed + r)

    def one(algo, repeat):
        r, target, drafter, prompt = repeat
        k = lookahead.get(algo) if isinstance(lookahead, Mapping) else lookahead
        tree_of = tree if algo.endswith("-tree") else None
        return run_once(
            prompt, target, drafter, algorithm=algo.removesuffix("-tree"), lookahead=k, tree=tree_of, seed=seed + r,
            **run,
        )  # fmt: skip

    runs = run_arms(
        algorithms, repeats, one, setup=setup, on_result=(lambda a, r, res: progress(a)) if progress else None
    )
    exact = run.get("temperature", 0.0) == 0 or run.get("coupling") == "gumbel"  # the tokens must be non-SI's
    return {algo: summarize(algo, results, runs, exact) for algo, results in runs.items()}


def summarize(algo: str, results: list, runs: dict, exact: bool) -> AlgorithmSummary:
    """One algorithm's runs summarized, beside non-SI's and SI's (``runs``: every algorithm's); exact: its tokens
    must be non-SI's (greedy, or the Gumbel coupling), not only follow their law."""
    s = AlgorithmSummary(
        algo, results[0].lookahead, results[0].sp_degree, [x.time_ms for x in results], first_run=results[0]
    )
    total = {k: sum(getattr(x, k) for x in results) for k in ("drafted", "accepted", "rounds", "verifications")}
    if total["drafted"]:
        s.acceptance_rate = total["accepted"] / total["drafted"]
    if total["rounds"]:
        s.mean_run_length = 1 + total["accepted"] / total["rounds"]
    if total["verifications"]:
        s.mean_acceptance_length = sum(len(x.tokens) for x in results) / total["verifications"]
    s.target_forwards = statistics.fmean(x.target_forwards for x in results)
    s.drafter_forwards = statistics.fmean(x.drafter_forwards for x in results)
    if "nonsi" in runs:
        s.vs_nonsi = speedup([x.time_ms for x in runs["nonsi"]], s.time_ms)
        if exact:
            s.same_tokens_as_nonsi = all(a.tokens == b.tokens for a, b in zip(runs["nonsi"], results))
    if "si" in runs:
        s.vs_si = speedup([x.time_ms for x in runs["si"]], s.time_ms)
    return s
