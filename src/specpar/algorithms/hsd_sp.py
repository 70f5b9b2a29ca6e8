"""HSD with speculation parallelism: DSI at the top of a hierarchy.

The drafter levels M0 .. M_{K-1} act together as one drafter server (:class:`LevelsServer`), behind DSI's proposer
:class:`LevelsDrafter`: a Draft(context, k) call returns M_{K-1}'s next k tokens, produced by HSD's recursion
(:class:`~specpar.algorithms.hsd.DrafterLevels`, the code :func:`~specpar.algorithms.hsd.hsd` runs) with M_{K-1}'s
rows as their q. DSI runs unchanged on top: the target verifies each batch on one of ``sp_degree`` servers while the
levels below produce the next batch, and a rejection cancels what depends on it.

Lossless, since DSI is lossless for any drafter whose proposals carry the rows they were sampled from. Inside the
levels the calls run one after another (overlapping them would need several servers per level). DSI's guarantee of
never being slower than the target alone holds when a batch of k tokens from the levels takes less time than k
target passes (the paper's Assumption 2 for the sub-hierarchy). On the virtual clock the whole sub-hierarchy is
computed when a Draft task starts (its duration is the sum of its calls); on threads it runs inside the task and
stops between calls once cancelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specpar.algorithms.dsi import dsi
from specpar.algorithms.generation import Generation
from specpar.algorithms.hsd import DrafterLevels, check_buffers
from specpar.algorithms.proposers import ModelDrafter
from specpar.core.calls import Proposal
from specpar.core.config import SpeculativeConfig
from specpar.core.decoding import Decoding
from specpar.core.errors import Cancelled, ConfigError
from specpar.core.model import Server
from specpar.core.results import GenerationResult
from specpar.runtimes.base import Pool, Runtime, Task


@dataclass(slots=True)
class LevelsProposal(Proposal):
    """A Proposal with the work the levels did for it: DrafterLevels.counts() accrued by this one call."""

    work: list[list[int]] = field(default_factory=list)


class LevelsServer(Server):
    """The drafter levels of a hierarchy as one server: Draft(context, k) -> M_{K-1}'s next k tokens. servers: [K]
    servers of M0 .. M_{K-1}, smallest first; buffers: [K - 1] T_0 .. T_{K-2} (T_{K-1} is each call's k)."""

    def __init__(self, servers: Sequence, buffers: Sequence[int], name: str = "levels"):
        if not servers:
            raise ConfigError("a LevelsServer needs at least one drafter server")
        self.servers = self.parts = list(servers)
        self.name = name
        self.levels = DrafterLevels(self._run_now, check_buffers(buffers, len(servers) - 1) + [1])
        self._elapsed = 0.0
        self._computed = (None, None)  # (call, result) computed by duration_ms for the virtual clock
        self._cancelled = None

    def _draft(self, call) -> LevelsProposal:
        top = len(self.servers) - 1
        before = self.levels.counts()
        proposal = self.levels.fill(top, call.context, len(call.context) + call.k, call.decoding, want=call.k)
        work = [[x - y for x, y in zip(now, then)] for now, then in zip(self.levels.counts(), before)]
        return LevelsProposal(proposal.tokens, proposal.q, work)

    def _run_now(self, m: int, call):
        server = self.servers[m]
        self._elapsed += server.duration_ms(call)
        return server.compute(call)

    def _run_real(self, m: int, call):
        result = self.servers[m].run(call, self._cancelled)
        if result is None:
            raise Cancelled
        return result

    # The runtime's server contract.
    def cached_len(self, context) -> int:
        return self.servers[-1].cached_len(context)

    def duration_ms(self, call) -> float:
        self._elapsed, self.levels.run = 0.0, self._run_now
        self._computed = (call, self._draft(call))
        return self._elapsed

    def compute(self, call):
        done, result = self._computed
        self._computed = (None, None)
        if done is call:
            return result
        self.levels.run = self._run_now
        return self._draft(call)

    def run(self, call, cancelled):
        self._cancelled, self.levels.run = cancelled, self._run_real
        try:
            return self._draft(call)
        except Cancelled:
            return None

    def __repr__(self) -> str:
        return f"LevelsServer({self.name}, {len(self.servers)} levels)"


class LevelsDrafter(ModelDrafter):
    """HSD's levels below the target as a proposer: each proposal is one Draft call on a pool of one
    :class:`LevelsServer` (M_{K-1}'s next k tokens, with M_{K-1}'s rows as their q), one runtime task. It keeps its
    tasks, for the work the levels did (:meth:`work`)."""

    def __init__(self, runtime: Runtime, pool: Pool):
        if len(pool) != 1 or not isinstance(pool.servers[0], LevelsServer):
            raise ConfigError("hsd_sp needs a pool holding one LevelsServer (the drafter levels of the hierarchy)")
        super().__init__(runtime, pool)
        self.levels = pool.servers[0].levels
        self.tasks = []

    def propose(self, context, k: int, decoding: Decoding) -> Task:
        task = super().propose(context, k, decoding)
        self.tasks.append(task)
        return task

    def work(self) -> list[list[int]]:
        """The levels' counts (as DrafterLevels.counts()) in completed proposals only, as drafter_forwards counts DSI's
        drafts (a cancelled one was computed whole on the virtual clock, partly on threads)."""
        done = [t.result.work for t in self.tasks if t.done and not t.cancelled and t.result is not None]
        if not done:
            return [[0] * len(self.levels.T) for _ in range(4)]
        return [[sum(level) for level in zip(*(w[i] for w in done))] for i in range(4)]


def hsd_sp(g: Generation, pools: dict[str, Pool], spec: SpeculativeConfig) -> GenerationResult:
    """DSI on ``pools["target"]`` with ``pools["levels"]`` (a pool of one :class:`LevelsServer`) as its drafter;
    lookahead = T_{K-1}, the last of ``spec.buffers``."""
    proposer = LevelsDrafter(g.runtime, pools["levels"])
    lookahead = spec.buffers[-1]
    result = dsi(g, pools, spec.replace(lookahead=lookahead), proposer)
    counts = proposer.work()
    below = proposer.levels
    result.algorithm = "hsd-sp"
    result.drafter_forwards = sum(counts[1])
    result.details = below.details(result.target_forwards, result.drafted, result.accepted, counts)
    result.details["buffers"] = below.T[:-1] + [lookahead]
    return result
