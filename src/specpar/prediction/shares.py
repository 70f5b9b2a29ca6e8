"""Share curves: a request's best option on each number of processing units, predicted by the simulator.

For a request whose speculation is ``spec`` (its ceiling: DSI > SI > non-SI) on models with known latency
profiles and acceptance rate (simulated models, or models given a measured profile), each option's time per token
is predicted as ``lookahead="auto"`` predicts it (:func:`specpar.prediction.lookahead_choice.predict_ms`: the
vectorized fast path in the paper's time-unit model, else the virtual clock), at the lookahead the option would run
with: the request's own if it gave an integer, the fastest predicted for "auto", else Eq. 1's smallest (the
runner's default). Non-SI is always an option, so no share runs slower than non-SI would on one unit.

Given a machine's predictions (``predict``: a request's time as the engine would run it on this machine,
:func:`specpar.prediction.auto.predict_request`, the ones ``algorithm="auto"`` chooses by), every option is
predicted by them instead: the machine profile's costs (v(k), contention, overheads), token trees and the n-gram
proposer included.

Where latencies are unknown the options keep the order DSI > SI > non-SI without predictions (:class:`ShareCurve`
then splits units evenly). Without a machine's predictions, token trees and HSD are not predicted either.
"""

from __future__ import annotations

from collections.abc import Callable

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
    machine: Callable[[SpeculativeConfig, int], float] | None = None,
) -> ShareCurve:
    """The options of a request of ``spec`` under ``policy`` ("adaptive", or fixed "dsi", "si", "nonsi") on a
    scheduler of ``units`` units. target, drafter: models or Pools (their latency profiles and the drafter's
    acceptance rate are read when known). machine: (a request's SpeculativeConfig, output tokens) -> its predicted
    ms on this machine (the module docstring); None: from the latency profiles."""
    if policy not in POLICIES:
        raise ConfigError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    predict = _Predictor(spec, target, drafter, min(max_tokens, CURVE_TOKENS), seed, machine)
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
                best = Option(u, *_config(options[-1]))
        else:  # no predictions: the request's own order, DSI > SI > non-SI
            best = fits[-1]
        options.append(best)
    return ShareCurve(tuple(options))


def _config(option: Option) -> tuple:
    return option.algorithm, option.sp_degree, option.lookahead, option.ms_per_token


class _Predictor:
    """Options with their predicted time per token (memoized per configuration)."""

    def __init__(self, spec: SpeculativeConfig, target, drafter, n: int, seed: int, machine=None):
        self.spec, self.n, self.seed, self.machine = spec, max(2, n), seed, machine
        self.t, self.d = latency_of(target), latency_of(drafter) if drafter is not None else None
        self.a = model_of(drafter).acceptance_rate if drafter is not None else None
        self.known = (
            self.t is not None
            and self.t.tpot_ms > 0
            and spec.tree is None
            and (spec.algorithm == "nonsi" or (self.d is not None and self.d.tpot_ms > 0 and self.a is not None))
            and spec.proposer is None  # the drafter model's latency and rate say nothing of the n-gram proposer
        ) or machine is not None
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
        if self.machine is not None:
            return self._on_machine(algorithm, sp, k)
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

    def _on_machine(self, algorithm: str, sp: int, k: int | None) -> tuple[int | None, float]:
        """An option's (lookahead, ms per token) by the machine's predictions: the request's lookahead, the runner's
        default (None), or for "auto" the fastest of the lookaheads the predictions search."""
        from specpar.prediction.methods import LOOKAHEADS

        option = self.spec.for_request(algorithm=algorithm, sp_degree=sp if algorithm == "dsi" else None)
        if algorithm == "nonsi":
            return None, self.machine(option, self.n) / self.n
        if self.spec.lookahead == "auto":
            times = {j: self.machine(option.replace(lookahead=j), self.n) for j in LOOKAHEADS if j < self.n}
            k = min(times, key=times.get)
            return k, times[k] / self.n
        return k, self.machine(option.replace(lookahead=k) if k else option, self.n) / self.n


class Curves:
    """An engine's share curves, made once per configuration and length (:func:`share_curve`): under ``policy`` on
    ``units`` units of ``target`` and ``drafter`` Pools; one unit (ready-made servers) runs each request's own
    configuration on all of it."""

    def __init__(self, policy: str, target, drafter, units: int):
        self.policy, self.target, self.drafter, self.units = policy, target, drafter, units
        self._made: dict = {}

    def of(self, spec: SpeculativeConfig, max_tokens: int, machine=None) -> ShareCurve:
        """``spec``'s curve for requests of ``max_tokens`` tokens; ``machine``: the machine's predictions (a
        configuration auto chose: its shares predicted as auto predicts, :func:`share_curve`)."""
        key = (spec, min(max_tokens, CURVE_TOKENS), machine is not None)
        curve = self._made.get(key)
        if curve is None:
            if self.units == 1:
                k = spec.lookahead if isinstance(spec.lookahead, int) else None
                curve = fixed(Option(1, spec.algorithm, spec.sp_degree or 1, k))
            else:
                curve = share_curve(self.policy, spec, self.target, self.drafter, self.units, max_tokens,
                                    machine=machine)  # fmt: skip
            self._made[key] = curve
        return curve
