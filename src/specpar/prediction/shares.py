"""Share curves: a request's best option on each number of processing units, predicted by the simulator.

For a request of ``spec`` (its ceiling: DSI > SI > non-SI) on models with known latency profiles and acceptance rate,
each option's time per token is predicted as ``lookahead="auto"`` predicts it
(:func:`specpar.prediction.lookahead_choice.predict_ms`), at the lookahead the option would run with: the request's
own, the fastest for "auto", else Eq. 1's smallest. Non-SI is always an option, so no share runs slower than non-SI
would on one unit. A request auto resolved has its curve made of auto's own predictions (:func:`choice_curve`).
Where latencies are unknown the options keep the order DSI > SI > non-SI without predictions (:class:`ShareCurve`
then splits units evenly); token trees and HSD are not predicted.
"""

from __future__ import annotations

from dataclasses import replace

from specpar.core.config import SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.planning.load import POLICIES, Option, ShareCurve, fixed
from specpar.planning.lookahead import min_lookahead
from specpar.runtimes.base import latency_of, model_of

CURVE_TOKENS = 100  # predictions are for requests of this many tokens (shorter ones: their own length)


def max_share(spec: SpeculativeConfig, units: int) -> int:
    """The most units a request of ``spec`` can use: its DSI share (SP degree + the drafter's unit), else one."""
    if spec.algorithm in ("dsi", "hsd-sp"):
        return max(1, min(units, (spec.sp_degree or units - 1) + 1))
    return 1


def share_curve(
    policy: str,
    spec: SpeculativeConfig,
    target,
    drafter,
    units: int,
    max_tokens: int = CURVE_TOKENS,
    seed: int = 0,
) -> ShareCurve:
    """The options of a request of ``spec`` under ``policy`` ("adaptive", or fixed "dsi", "si", "nonsi") on
    ``units`` units of ``target`` and ``drafter`` (models or Pools)."""
    if policy not in POLICIES:
        raise ConfigError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    predict = _Predictor(spec, target, drafter, min(max_tokens, CURVE_TOKENS), seed)
    top = max_share(spec, units)
    ceiling = spec.algorithm
    if policy == "nonsi" or ceiling == "nonsi":
        return fixed(predict.option(1, "nonsi"))
    if ceiling == "hsd":
        return fixed(Option(1, "hsd"))
    if ceiling == "hsd-sp":
        if policy == "si" or top == 1:
            return fixed(Option(1, "hsd"))
        if policy == "dsi":
            return fixed(Option(top, "hsd-sp", top - 1))
        return ShareCurve((Option(1, "hsd"), *(Option(u, "hsd-sp", u - 1) for u in range(2, top + 1))))
    if policy == "si" or (policy == "dsi" and ceiling == "si"):
        return fixed(predict.option(1, "si"))
    if policy == "dsi":
        return fixed(predict.option(top, "dsi", top - 1) if top > 1 else predict.option(1, "si"))
    # adaptive: on each share the fastest option that fits, non-SI included
    options = []
    for u in range(1, top + 1):
        fits = [predict.option(u, "nonsi"), predict.option(u, "si")]
        if ceiling == "dsi":
            fits += [predict.option(u, "dsi", s) for s in range(1, u)]
        if predict.known:
            best = min(fits, key=lambda o: o.ms_per_token)
            if options and options[-1].ms_per_token <= best.ms_per_token:  # a unit more gains nothing
                best = replace(options[-1], units=u)
        else:  # no predictions: the request's own order, DSI > SI > non-SI
            best = fits[-1]
        options.append(best)
    return ShareCurve(tuple(options))


class _Predictor:
    """Options with their predicted time per token (memoized per configuration)."""

    def __init__(self, spec: SpeculativeConfig, target, drafter, n: int, seed: int):
        self.spec, self.n, self.seed = spec, max(2, n), seed
        self.t, self.d = latency_of(target), latency_of(drafter) if drafter is not None else None
        self.a = model_of(drafter).acceptance_rate if drafter is not None else None
        self.known = (
            self.t is not None
            and self.t.tpot_ms > 0
            and spec.tree is None
            and (spec.algorithm == "nonsi" or (self.d is not None and self.d.tpot_ms > 0 and self.a is not None))
            and spec.proposer is None  # the drafter model's latency and rate say nothing of the n-gram proposer
        )
        self._memo: dict = {}

    def option(self, units: int, algorithm: str, sp: int = 1) -> Option:
        key = (algorithm, sp)
        if key not in self._memo:
            self._memo[key] = self._predict(algorithm, sp)
        k, ms = self._memo[key]
        return Option(units, algorithm, sp, k, ms)

    def _predict(self, algorithm: str, sp: int) -> tuple[int | None, float | None]:
        from specpar.prediction.lookahead_choice import choose_lookahead, predict_ms

        spec, n = self.spec, self.n
        k = spec.lookahead if isinstance(spec.lookahead, int) else None
        if not self.known:
            return k, None
        t = self.t
        if algorithm == "nonsi":
            return None, (t.ttft_ms + (n - 1) * t.tpot_ms) / n
        cursor = spec.dedicated_cursor if algorithm == "dsi" else None
        if spec.lookahead == "auto":
            choice = choose_lookahead(t, self.d, self.a, sp, n, seed=self.seed, algorithm=algorithm,
                                      dedicated_cursor=cursor)  # fmt: skip
            return choice.lookahead, choice.predicted_ms[choice.lookahead] / n
        if k is None:  # the runner's default: Eq. 1's smallest for this SP degree
            try:
                k = min_lookahead(t.tpot_ms, self.d.tpot_ms, sp, per_token_ms=t.per_token_ms, dedicated_cursor=cursor)
            except ConfigError:
                k = 5
        setting = SpeculativeConfig(algorithm=algorithm, sp_degree=sp, dedicated_cursor=cursor)
        return k, predict_ms(setting, t, self.d, self.a, n, [k], self.seed)[k] / n


class Curves:
    """An engine's share curves under ``policy`` on ``units`` units, made once per configuration and length; one unit
    (ready-made servers) runs each request's own configuration."""

    def __init__(self, policy: str, target, drafter, units: int):
        self.policy, self.target, self.drafter, self.units = policy, target, drafter, units
        self._made: dict = {}

    def of(self, spec: SpeculativeConfig, max_tokens: int) -> ShareCurve:
        """``spec``'s curve for requests of ``max_tokens`` tokens (a configuration auto chose: :func:`choice_curve`)."""
        key = (spec, min(max_tokens, CURVE_TOKENS))
        curve = self._made.get(key)
        if curve is None:
            if self.units == 1:
                k = spec.lookahead if isinstance(spec.lookahead, int) else None
                curve = fixed(Option(1, spec.algorithm, spec.sp_degree or 1, k))
            else:
                curve = share_curve(self.policy, spec, self.target, self.drafter, self.units, max_tokens)
            self._made[key] = curve
        return curve


def choice_curve(choice, units: int, policy: str) -> ShareCurve:
    """The shares of a request ``algorithm="auto"`` resolved (``choice``: a :class:`specpar.prediction.auto.Choice`)
    on ``units`` units under ``policy``, from auto's own predictions: on its largest share the choice at its
    predicted time; under the adaptive policy, on each smaller share the fastest setting auto predicted that runs
    there as the request would (:func:`_runs_as`) and is slower than the choice, else the smaller share's. Fixed
    policies: the choice alone (auto chose among what the policy runs)."""
    spec, predictions = choice.spec, choice.predictions
    n = predictions.max_tokens
    top = max_share(spec, units)

    def option(u: int, p) -> Option:
        s = p.spec
        return Option(u, s.algorithm, s.sp_degree if s.algorithm == "dsi" else 1, s.lookahead, p.ms / n)

    chosen = option(top, choice.chosen)
    if policy != "adaptive" or top == 1:
        return fixed(chosen)
    candidates = {p.spec: p for p in (*predictions.tried, *predictions.best) if _runs_as(p.spec, spec)}
    candidates = [p for p in candidates.values() if p.ms > choice.chosen.ms]
    options: list[Option] = []
    for u in range(1, top):
        fits = [p for p in candidates if max_share(p.spec, units) <= u]
        best = option(u, min(fits, key=lambda p: p.ms))
        if options and options[-1].ms_per_token <= best.ms_per_token:  # a unit more gains nothing
            best = replace(options[-1], units=u)
        options.append(best)
    return ShareCurve((*options, chosen))


def _runs_as(setting: SpeculativeConfig, spec: SpeculativeConfig) -> bool:
    """Whether a request of ``spec`` runs ``setting`` when its share's option is ``setting``'s algorithm and SP
    degree: non-SI always; SI and DSI with ``spec``'s tree, proposer and lookahead (and DSI with its cursor)."""
    if setting.algorithm == "nonsi":
        return True
    same = (setting.tree, setting.proposer, setting.lookahead) == (spec.tree, spec.proposer, spec.lookahead)
    if setting.algorithm == "dsi":
        return same and spec.algorithm == "dsi" and setting.dedicated_cursor == spec.dedicated_cursor
    return same and setting.algorithm == "si"
