"""Several drafters as one server: each expands the same token tree configuration, the trees are merged.

SpecInfer's merge-based construction (:func:`specpar.core.trees.merge`: shared prefixes become one node) as one
drafter server that answers a :class:`~specpar.core.calls.DraftTree` with the merged tree, so its drafters run as one
runtime task and SI and DSI draft on it as on one model, with no code of their own for merges.
"""

from __future__ import annotations

from collections.abc import Sequence

from specpar.core.calls import DraftTree
from specpar.core.errors import ConfigError
from specpar.core.model import Server
from specpar.core.trees import TokenTree, merge, source_decoding


class MergedDrafters(Server):
    """Drafter servers s = 0, 1, ... behind one server: drafter s drafts with its own seed
    (:func:`~specpar.core.trees.source_decoding`) and its nodes carry ``source = s``. On the virtual clock they run
    side by side (a call takes the slowest one's time); on threads one after another."""

    def __init__(self, servers: Sequence, name: str = "merged"):
        if not servers:
            raise ConfigError("a merge of drafters needs at least one drafter")
        self.servers = self.parts = list(servers)
        self.name = name
        self.latency = self.servers[0].latency

    def _calls(self, call) -> list[DraftTree]:
        if type(call) is not DraftTree:
            raise ConfigError("several drafters draft only token trees (merge-based): give tree=<k1,...,km>")
        return [
            DraftTree(call.context, call.shape, source_decoding(call.decoding, s), s) for s in range(len(self.servers))
        ]

    def cached_len(self, context) -> int:
        return min(s.cached_len(context) for s in self.servers)

    def duration_ms(self, call) -> float:
        return max(s.duration_ms(c) for s, c in zip(self.servers, self._calls(call)))

    def compute(self, call) -> TokenTree:
        return merge([s.compute(c) for s, c in zip(self.servers, self._calls(call))])

    def run(self, call, cancelled):
        trees = []
        for s, c in zip(self.servers, self._calls(call)):
            tree = s.run(c, cancelled)
            if tree is None:
                return None
            trees.append(tree)
        return merge(trees)

    def __repr__(self) -> str:
        return f"MergedDrafters({', '.join(s.name for s in self.servers)})"
