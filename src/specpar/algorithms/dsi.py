"""DSI: distributed speculative inference (Timor et al., ICLR 2025), Algorithm 1 with lookahead (App. D).

Speculation parallelism: verification tasks run on up to sp_degree target servers *while the drafter keeps
drafting*, so only rejected drafts cost target time. Algorithm 1's threads are runtime tasks here: the drafter's (a
proposer's, :mod:`specpar.algorithms.proposers`) and the targets'. Its current verifier is the target task that
works on the cursor, the first position not yet verified.

* At the start and after every rejection, one target server starts at once on the verified prefix while the drafter
  drafts from it (lines 2-3 and 11).
* Each chunk of k drafts (a lookahead window) goes to a free target server (one forward pass scores the chunk: rows
  for its k positions plus the one after), while the drafter drafts the next chunk from the unverified drafts (line 6).
* Target rows are consumed in position order. Each draft is tested exactly once, with its q and the target's row at
  its position, whichever task delivered that row first; a chunk's extra row judges the next chunk's first draft as
  soon as it exists, with no further target pass (lines 7-14).
* A rejection cancels every task that depends on the rejected draft (later verifications and the running draft) and
  restarts from the corrected prefix (lines 8 and 10).

Theorem 1 (DSI is never slower than non-SI): before every event a target server works on the cursor, or its row
there is already known (:meth:`DSI.cover_cursor`). The passes on the cursor, one after another, are non-SI's own
passes on the same prefixes, each started no later than non-SI would start it (a verification that covers the cursor
is such a pass that also scores drafts, in the same time while verifying costs no more than a pass); an accepted
draft, or a row a verification delivers ahead of the cursor, only moves the cursor sooner. So the last token is
verified no later than non-SI verifies it. Drafting never delays a target pass.

When verifying costs more than a pass on the verified prefix (a per-token cost, as on CPUs; ``dedicated_cursor``), a
verification that covers the cursor no longer stands in for that pass: a pass with no drafts always runs on the
cursor, and verifications use at most sp_degree - 1 servers, so that one is always free for it. Chunks drafted while
those servers are busy wait, and are verified together when one frees. With one target server there is none to
keep: it then verifies too, and Theorem 1 needs sp_degree >= 2.

With token trees (SpecInfer) each chunk is a tree, and DSI goes on from the path to its most likely leaf
(:mod:`specpar.algorithms.tree_drafts`; chains: :mod:`specpar.algorithms.drafts`). A strategy only returns a verdict
on the draft at the cursor; DSI acts on it (:meth:`DSI.settle` -> :meth:`DSI.reject` -> cancel). The state is one
:class:`DSI` object; its methods are the events of Algorithm 1.
"""

from __future__ import annotations

from specpar.algorithms.drafting import make_proposer
from specpar.algorithms.drafts import Chains, DraftsView, Pending
from specpar.algorithms.generation import Generation
from specpar.algorithms.proposers import Drafted, Proposer, lookahead_of
from specpar.algorithms.tree_drafts import Trees
from specpar.core.calls import Score, ScoreTree
from specpar.core.config import SpeculativeConfig
from specpar.core.numbers import positive_int
from specpar.core.results import GenerationResult
from specpar.runtimes.base import Pool, Task


class DSI:
    """One DSI generation: its state and the events that change it.

    pending: the unverified drafts (:class:`~specpar.algorithms.drafts.Pending`), whose records are the strategy's
        (``shape``: :class:`~specpar.algorithms.drafts.Chains` or :class:`~specpar.algorithms.tree_drafts.Trees`).
    known: target rows at positions >= the cursor, from finished verifications (position -> row).
    scored: token trees only: the finished tree verifications since the last rejection, as (tree, start, rows).
    verifying: verification tasks in flight, ordered by the position of their first row.
    view: what the strategy sees of these (:class:`~specpar.algorithms.drafts.DraftsView`).
    drafting: the proposer's task in flight, or a draft it proposed at once (``ready``) not taken yet; None.
    drafted_from: the position that draft continues from. dry: the last proposal was empty (ask again only after
        the next event).
    warming: prefills of the prompt on the other target servers (prefill_replicas; never cancelled); warmed: those
        that completed. dedicated_cursor: one target server is kept for passes on the cursor (asked for, and there
        is more than one).
    """

    __slots__ = (
        "runtime", "target", "proposer", "g", "lookahead", "decoding", "shape", "pending", "known", "scored",
        "verifying", "view", "drafting", "ready", "drafted_from", "dry", "warming", "warmed", "dedicated_cursor",
    )  # fmt: skip

    def __init__(self, g: Generation, target: Pool, proposer: Proposer, lookahead: int, dedicated_cursor: bool):
        self.runtime, self.target, self.proposer, self.g = g.runtime, target, proposer, g
        self.lookahead, self.decoding = lookahead, g.decoding
        self.shape = Trees() if proposer.trees else Chains()
        self.pending = Pending()
        self.known: dict = {}
        self.scored: list[tuple] = []
        self.verifying: list[Task] = []
        self.view = DraftsView(g, self.pending, self.verifying, self.scored)
        self.drafting: Task | Drafted | None = None
        self.ready = False
        self.drafted_from = 0
        self.dry = False
        self.warming: set[Task] = set()
        self.warmed = 0
        self.dedicated_cursor = dedicated_cursor and len(target) > 1

    def run(self, prefill_replicas: bool = False) -> None:
        """Until every output token is verified: before every event, the invariants that make DSI never slower
        than non-SI, and drafting ahead; then the next event (a draft or a target pass finished)."""
        g, runtime = self.g, self.runtime
        if prefill_replicas:  # once the first pass on the cursor and the first draft are under way
            self.cover_cursor()
            self.keep_drafting()
            self.warm_up()
        while not g.done:
            self.cover_cursor()
            if self.drafting is None:
                self.keep_drafting()
            if self.pending.unsent:
                self.send()
            if self.ready:  # proposed at once, at no cost
                self.on_draft(self.drafting)
                continue
            task = runtime.wait()
            if task is self.drafting:
                self.on_draft(task.result)
            else:
                self.on_scores(task)

    def warm_up(self) -> None:
        """Every other target server prefills the prompt (prefill_replicas)."""
        for _ in range(len(self.target) - 1):
            self.warming.add(self.runtime.submit(self.target, Score(self.g.context(), 0, self.decoding)))

    def on_draft(self, draft: Drafted) -> None:
        """The proposer's draft arrived (line 4, a drafter's thread): hand the drafter its next chunk (line 6),
        test what the known rows can, send the chunk to a target."""
        self.drafting, self.ready = None, False
        g, pending = self.g, self.pending
        taken = len(g.out) + len(pending) - self.drafted_from  # positions the target filled while it was drafted
        n = self.shape.add(self.view, draft, self.drafted_from, taken)
        if n < 0:
            return  # drafted from a prefix the target has since contradicted
        if not n and not taken:
            self.dry = True  # the proposer had nothing to propose here
        if len(g.out) not in self.known:  # nothing can test the new drafts yet: the drafter's next chunk first
            self.keep_drafting()
        if self.settle():  # the previous chunk's extra row may test the first new draft at once
            pending.unsent = min(pending.unsent + n, len(pending))
            self.send()

    def on_scores(self, task: Task) -> None:
        """A target pass finished (line 4, a target's thread): its rows at the cursor and beyond are known; settle
        what they decide."""
        self.dry = False  # (only a target pass can end a dry spell: no draft is in flight then)
        if task in self.warming:
            self.warming.discard(task)
            self.warmed += 1
        else:
            self.verifying.remove(task)
        result, known = task.result, self.known
        rows = result.rows if type(task.call) is not ScoreTree else self.shape.rows(self.view, task)
        start = result.start
        for i in range(max(0, len(self.g.out) - start), len(rows)):  # rows at the cursor and beyond
            known[start + i] = rows[i]
        if self.settle():
            pending = self.pending  # the cursor's pass may have tested drafts that waited
            pending.unsent = min(pending.unsent, len(pending))

    def settle(self) -> bool:
        """The current verifier's work (lines 7-14): resolve the cursor with the target rows known for it, in position
        order: a draft there is tested (accepted: output; rejected: :meth:`reject`, False), else the target's own
        token is taken, as non-SI would."""
        g, known, pending = self.g, self.known, self.pending
        while not g.done:
            row = known.pop(len(g.out), None)
            if row is None:
                break
            if not pending.tokens:
                g.take(row)
                continue
            verdict = self.shape.test(self.view, row)
            if verdict.accepted:
                pending.accept_first()
                continue
            self.reject(keep=verdict.keep)
            if verdict.keep is not None:  # a token tree's accepted sibling: its branch, being verified, is next
                self.shape.follow(self.view, verdict.keep)
            return False
        return True

    def reject(self, keep: Task | None = None) -> None:
        """A draft was rejected (lines 8 and 10): cancel every task that depends on it and forget the later drafts.
        ``keep``: a verification kept running (its tree holds the accepted sibling's branch)."""
        runtime = self.runtime
        for task in self.verifying:
            if task is not keep:
                runtime.cancel(task)
        if self.drafting is not None:
            if not self.ready:
                runtime.cancel(self.drafting)
            self.drafting, self.ready = None, False
        self.verifying.clear()
        if keep is not None:
            self.verifying.append(keep)
        self.pending.clear()
        self.known.clear()
        self.scored.clear()
        self.dry = False

    def cover_cursor(self) -> None:
        """A target works on (or already knows) the cursor, the current verifier (lines 3 and 11); tasks wholly
        behind it are dropped."""
        cursor, verifying = len(self.g.out), self.verifying
        while verifying and verifying[0].call.end < cursor:
            self.runtime.cancel(verifying.pop(0))  # every row it would give is already behind the cursor
        if cursor in self.known:
            return
        if not self.dedicated_cursor:  # a verification that covers the cursor stands in for a pass on it
            if verifying and verifying[0].call.start <= cursor:
                return
            at = 0
        elif (at := self.dedicated_pass_at(cursor)) is None:
            return
        verifying.insert(at, self.runtime.submit(self.target, Score(self.g.context(), 0, self.decoding)))

    def dedicated_pass_at(self, cursor: int) -> int | None:
        """With a server kept for the cursor: where a pass with no drafts on it goes in ``verifying`` (after the
        tasks from before the cursor); None when one is there already."""
        verifying = self.verifying
        behind = 0
        while behind < len(verifying) and verifying[behind].call.start < cursor:
            behind += 1
        if any(t.call.start == cursor and not t.call.n_drafts for t in verifying[behind:]):
            return None
        return behind

    def keep_drafting(self) -> None:
        """The proposer (idle: ``drafting`` is None) drafts the next chunk after the last draft."""
        if self.dry:
            return
        g, tokens = self.g, self.pending.tokens
        position = len(g.out) + len(tokens)
        k = g.lookahead_at(position, self.lookahead)
        if k:
            self.drafted_from = position
            self.drafting = drafting = self.proposer.propose(g.context(tokens), k, self.decoding)
            if type(drafting) is not Task:
                self.ready = True

    def send(self) -> None:
        """Verify the drafts that wait, in one pass, if a server is free for it (the runtime queues otherwise,
        unless one server is kept for the cursor)."""
        pending = self.pending
        if pending.unsent and (
            not self.dedicated_cursor or sum(1 for t in self.verifying if t.call.n_drafts) < len(self.target) - 1
        ):
            self.verifying.append(self.runtime.submit(self.target, self.shape.verification(self.view)))
            pending.unsent = 0


def dsi(
    g: Generation, pools: dict[str, Pool], spec: SpeculativeConfig, proposer: Proposer | None = None
) -> GenerationResult:
    """DSI on ``pools["target"]`` (sp_degree servers) with the proposer ``spec`` and ``pools`` make
    (:func:`~specpar.algorithms.drafting.make_proposer`), or with ``proposer`` (one that drafts token trees makes
    each chunk a tree and the lookahead its depth).

    spec.prefill_replicas: at the start every target server prefills the prompt at once, so that no verification
    pays a prefill on a cold replica. spec.dedicated_cursor: a server kept for passes on the cursor (module
    docstring)."""
    target = pools["target"]
    proposer = make_proposer(g, pools, spec) if proposer is None else proposer
    lookahead = positive_int("lookahead (k)", lookahead_of(proposer, spec.lookahead))
    g.feedback = proposer.feedback
    state = DSI(g, target, proposer, lookahead, bool(spec.dedicated_cursor))
    state.run(bool(spec.prefill_replicas))
    return g.result("dsi", lookahead=lookahead, sp_degree=len(target), warm_ups=state.warmed)
