"""Machines where speculation pays: on a GPU-like profile (a pass over k tokens costs one step, a device per server)
the prediction reproduces the DSI paper's speedups of DSI over SI, and ``auto`` picks DSI; on a CPU profile whose
passes cost more per token, with several free cores (no contention) and with two shared ones.

Arms (each a machine and a cell of drafter latency c, acceptance a):

* "gpu": ``MachineProfile.gpu_like(1, c, a)``, an engine of 7 target servers and a drafter (the paper's 8 GPUs).
  Figures: DSI / SI as the paper's own model computes it (Table 2's way: N = 50, lookahead in {1, 5, 10}, DSI
  where Eq. 1 holds with SP <= 7: ``experiments.claims.measure_table2_row``, the vectorized fast path); the same
  ratio by the prediction (chains: each at its best lookahead 1..8 and SP), with cancelled passes freeing their
  server at once (the paper's assumption) and running to their end (a real device's); what auto picks and its
  predicted speedup over non-SI.
* "cpu, 8 free cores" / "cpu, 2 shared cores": the default pair's passes on llama.cpp's exact settings (v(k)
  from docs/measurements.md's llama_costs figures: a pass over 8 tokens 3.76 steps), the drafter at c, each server
  on a core of its own; and the same on 2 cores shared (two target processes keep 86% of their speed, the issue's
  quiet figure). Figures: auto's pick and its predicted speedup over non-SI.

    python -m benchmarks auto_machines
"""

from __future__ import annotations

import numpy as np

from benchmarks.runner import Arm, Benchmark
from specpar.core.config import SpeculativeConfig
from specpar.experiments.claims import TABLE2_LOOKAHEADS, measure_table2_row
from specpar.planning.lookahead import sp_degree_needed
from specpar.prediction.auto import Auto
from specpar.prediction.machine import MachineProfile, ModelCosts
from specpar.prediction.methods import EngineShape, predict_methods
from specpar.prediction.simulate import predicted_ms

CELLS = ((0.05, 0.93), (0.1, 0.8), (0.2, 0.9), (0.66, 0.8))  # (c, a): StarCoder's a, Phi3's c, between
CPU_CELLS = ((0.5, 0.92), (0.3, 0.92), (0.1, 0.9))  # the default pair's c and a on llama.cpp (0.49-0.63, 0.92)
PROMPT, TOKENS = 16, 50


def arms(args) -> list[Arm]:
    out = [Arm(f"gpu c={c:g} a={a:g}", {"machine": "gpu", "c": c, "a": a}) for c, a in CELLS]
    for machine in ("cpu, 8 free cores", "cpu, 2 shared cores"):
        out += [Arm(f"{machine} c={c:g} a={a:g}", {"machine": machine, "c": c, "a": a}) for c, a in CPU_CELLS]
    return out


def cpu_profile(c: float, a: float, free: bool) -> MachineProfile:
    """The default pair's shape on llama.cpp's exact settings (docs/measurements.md, llama_costs: v(2), v(4), v(8) =
    1.28, 2.69, 3.76 v(1); a prefill of 16 tokens about 4 steps), the drafter at ``c``, acceptance ``a``; two cores
    shared (contention 1.0, 1.16, 1.8: two target processes keep 86% of their speed on a quiet machine), or
    ``free``: a core per server for 8."""
    v = tuple(float(np.interp(k, (1, 2, 4, 8), (1.0, 1.28, 2.69, 3.76))) + max(0, k - 8) * (3.76 - 2.69) / 4
              for k in range(1, 17))  # fmt: skip
    target = ModelCosts("cpu target", ((PROMPT, 4.0),), {1: v})
    drafter = ModelCosts("cpu drafter", ((PROMPT, 4.0 * c),), {1: tuple(c * x for x in v)})
    profile = MachineProfile(key={"what_if": "cpu"}, target=target, drafter=drafter, acceptance_rate=a,
                             contention=(1.0, 1.16, 1.8), cores=2)  # fmt: skip
    return profile.with_free_cores(8) if free else profile


def table2_ratio(profile: MachineProfile, c: float, pairs: int = 48) -> float:
    """SI's over DSI's predicted time the way Table 2 runs them: lookaheads 1, 5, 10, DSI on 7 servers where Eq. 1
    holds, each at its best; cancelled passes freed at once (the paper's model)."""
    shape = EngineShape(units=1, targets=7, runtime="virtual", cpu=False, cancel_frees="now")

    def ms(spec) -> float:
        return predicted_ms(profile, spec, PROMPT, TOKENS, shape, pairs=pairs)

    si = min(ms(SpeculativeConfig(algorithm="si", lookahead=k)) for k in TABLE2_LOOKAHEADS)
    dsi = min(
        ms(
            SpeculativeConfig(algorithm="dsi", lookahead=k, sp_degree=7, dedicated_cursor=False, prefill_replicas=False)
        )  # fmt: skip
        for k in TABLE2_LOOKAHEADS
        if sp_degree_needed(1.0, c, k) <= 7
    )
    return si / dsi


def measure(arm: Arm, args, r: int) -> dict:
    s = arm.settings
    c, a = s["c"], s["a"]
    if s["machine"] == "gpu":
        profile = MachineProfile.gpu_like(1.0, c, a)
        out = {"paper model DSI / SI": measure_table2_row(c, a)["speedup"],
               "predicted DSI / SI (Table 2's lookaheads)": table2_ratio(profile, c)}  # fmt: skip
        for mode, label in (("now", "preemptible"), ({"target": "end"}, "passes run to their end")):
            shape = EngineShape(units=1, targets=7, runtime="virtual", cpu=False, cancel_frees=mode)
            chains = predict_methods(profile, PROMPT, TOKENS, shape, methods=("si", "dsi"))
            out[f"predicted DSI / SI ({label})"] = chains.of("si").ms / chains.of("dsi").ms
        shape = EngineShape(units=1, targets=7, runtime="virtual", cpu=False, cancel_frees={"target": "end"})
    else:
        free = "free" in s["machine"]
        profile = cpu_profile(c, a, free)
        shape = EngineShape(units=1, targets=7 if free else 2, runtime="threads", cpu=True)
        out = {}
    choice = Auto(profile, shape).choose(PROMPT, TOKENS)
    plain = choice.predictions.of("nonsi").ms
    return {**out, "auto picks": choice.chosen.label, "auto predicted speedup over non-SI": plain / choice.predicted_ms}


def summarize(results, args) -> dict:
    gpu = [x for x in results if x.arm.settings["machine"] == "gpu"]
    return {
        "gpu: auto picks DSI in every cell": all(x.figures["auto picks"].startswith("DSI") for x in gpu),
        "gpu: paper model DSI / SI": [round(x.figures["paper model DSI / SI"], 2) for x in gpu],
        "gpu: predicted DSI / SI (Table 2's lookaheads)": [
            round(x.figures["predicted DSI / SI (Table 2's lookaheads)"], 2) for x in gpu
        ],
        "gpu: predicted DSI / SI (best settings, preemptible)": [
            round(x.figures["predicted DSI / SI (preemptible)"], 2) for x in gpu
        ],
        "cpu, 8 free cores: auto picks": [x.figures["auto picks"] for x in results if "free" in x.arm.name],
        "cpu, 2 shared cores: auto picks": [x.figures["auto picks"] for x in results if "shared" in x.arm.name],
    }


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "paper model DSI / SI": "SI's time over DSI's in the paper's model (Table 2's way)",
        "predicted DSI / SI (Table 2's lookaheads)": "the same by the prediction (lookaheads 1, 5, 10, SP 7)",
        "predicted DSI / SI (preemptible)": "SI's over DSI's predicted times, cancelled passes freed at once",
        "predicted DSI / SI (passes run to their end)": "the same, cancelled target passes running to their end",
        "auto picks": "the method and settings auto chooses",
        "auto predicted speedup over non-SI": "non-SI's predicted time over auto's choice's",
    },
    arms=arms,
    measure=measure,
    summarize=summarize,
)
