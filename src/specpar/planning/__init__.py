"""Planning (docs/design.md, layer 6): choosing lookahead, SP degree and hierarchies from latencies, and closed forms.

* :mod:`~specpar.planning.lookahead`: the DSI paper's Eq. 1 (lookahead vs SP degree) and the target servers
  DSI needs;
* :mod:`~specpar.planning.analytic`: closed forms (non-SI, SI, Proposition 1) as cross-checks of the simulator;
* :mod:`~specpar.planning.hsd_latency` and :mod:`~specpar.planning.hsd_optimizer`: HSD's expected latency and
  the generalized shortest path that picks a hierarchy.
"""

from specpar.planning.lookahead import min_lookahead, sp_degree_needed

__all__ = ["min_lookahead", "sp_degree_needed"]
