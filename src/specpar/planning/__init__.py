"""Planning: lookahead and SP degree from latencies (the paper's Eq. 1, :mod:`.lookahead`), closed forms
(:mod:`.analytic`), the adaptive lookahead's policy, HSD's latency model and optimizer, and the load policy."""

from specpar.planning.lookahead import min_lookahead, sp_degree_needed

__all__ = ["min_lookahead", "sp_degree_needed"]
