"""DSI: distributed speculative inference (Timor et al., ICLR 2025), Algorithm 1 with lookahead (App. D).

Speculation parallelism: verification tasks run on up to sp_degree target
servers *while the drafter keeps drafting*, so only rejected drafts cost target
time.

* At the start and after every rejection, one target server starts at once on
  the verified prefix while the drafter drafts from it. This is what makes DSI
  never slower than non-SI (Theorem 1): a target always works on the cursor.
* Each chunk of k drafts goes to a free target server (one forward pass scores
  the chunk: rows for its k positions plus the one after), while the drafter
  drafts the next chunk from the unverified drafts.
* Target rows are consumed in position order. Each draft is tested exactly
  once, with its q and the target's row at its position, whichever task
  delivered that row first; a chunk's extra row judges the next chunk's first
  draft as soon as it exists, with no further target pass.
* A rejection cancels every task that depends on the rejected draft (later
  verifications and the running draft) and restarts from the corrected prefix.

When verifying costs more than a pass on the verified prefix (a per-token cost, as on
CPUs; ``dedicated_cursor``), a verification that covers the cursor no longer stands in
for that pass: a pass with no drafts always runs on the cursor, and verifications use
at most sp_degree - 1 servers, so that one is always free for it. Chunks drafted while
those servers are busy wait, and are verified together when one frees. With one target
server there is none to keep: it then verifies too, and Theorem 1 needs sp_degree >= 2.

With ``tree=<k1, ..., km>`` (SpecInfer's token trees) each chunk is a tree: the drafter expands it from the last
draft, each verification task scores one tree in one pass, and the drafts DSI goes on from are the path to the
tree's most likely leaf (the next chunk is drafted from there). At the cursor, a draft is tested together with its
siblings (multi-step speculative sampling); when a sibling off that path is accepted, the tree's own rows (when
its task has finished) verify the rest of that branch, and everything drafted after the path is rejected.
"""

from __future__ import annotations

from collections.abc import Sequence

from specpar.core.calls import Draft, DraftTree, Score, ScoreTree
from specpar.core.decoding import GREEDY, Decoding
from specpar.core.results import GenerationResult
from specpar.core.trees import TokenTree, attach, check_tree, limit_depth, tree_depth
from specpar.runtimes.base import Pool, Runtime, Task
from specpar.spec.generation import Generation, check_positive_int


def dsi(
    runtime: Runtime,
    target: Pool,
    drafter: Pool,
    prompt: Sequence[int],
    max_new_tokens: int,
    lookahead: int,
    decoding: Decoding = GREEDY,
    stream=None,
    stopping=None,
    prefill_all: bool = False,
    dedicated_cursor: bool = False,
    tree: Sequence[int] | None = None,
) -> GenerationResult:
    """prefill_all: at the start, every target server prefills the prompt at once (in parallel), so that
    no verification later pays a prefill (TTFT) on a cold replica; worth it when TTFT > TPOT.
    dedicated_cursor: a pass with no drafts always works on the cursor, on a server kept for it (see the
    module docstring); for targets whose verification costs grow with the drafts fed.
    tree: a token tree configuration <k1, ..., km>; each chunk is such a tree (module docstring)."""
    if tree is not None:
        shape = check_tree(tree)
        lookahead = tree_depth(shape)
    check_positive_int("lookahead (k)", lookahead)
    g = Generation(prompt, max_new_tokens, decoding, runtime, stream, stopping)
    drafts: list[int] = []  # unverified drafts, at positions len(g.out), len(g.out) + 1, ...
    q_rows: list = []  # the drafter's row each draft was sampled from (None when greedy)
    windows: list[int] = []  # each draft's index within its lookahead window
    nodes: list[tuple[TokenTree, int]] = []  # trees only: each draft's tree and node (on that tree's chosen path)
    scored: list[tuple[TokenTree, int, list]] = []  # trees only: finished verifications (tree, start, rows)
    known: dict = {}  # target rows at positions >= the cursor, from finished verifications
    verifying: list[Task] = []  # verification tasks in flight, ordered by the position of their first row
    drafting: Task | None = None  # the drafter's task in flight
    warming: set[Task] = set()  # prefills of the prompt on the other target servers (never cancelled)
    warmed = 0  # of those, the ones that completed
    unsent = 0  # the last `unsent` drafts wait for a verification server (dedicated_cursor only)
    keep_one = dedicated_cursor and len(target) > 1  # one target server kept for passes on the cursor
    if tree is None:
        draft_call = Draft  # (context, k, decoding)
    else:

        def draft_call(context, k: int, decoding: Decoding) -> DraftTree:
            return DraftTree(context, limit_depth(shape, k), decoding)

    def reject_dependents() -> None:
        """A draft was rejected: cancel every task that depends on it and forget later drafts."""
        nonlocal drafting, unsent
        unsent = 0
        for t in verifying:
            runtime.cancel(t)
        if drafting is not None:
            runtime.cancel(drafting)
            drafting = None
        verifying.clear(), drafts.clear(), q_rows.clear(), windows.clear(), known.clear()
        if tree is not None:
            nodes.clear(), scored.clear()

    def below_cursor(t: TokenTree, start: int) -> int | None:
        """The node of ``t`` (hanging at ``start``) the verified output ends on, if it runs through ``t``."""
        below = t.follow(g.out[start:]) if start < len(g.out) else []
        return below[-1] if below and len(below) == len(g.out) - start else None

    def judge_in_tree(row) -> bool:
        """Test the draft at the cursor with its siblings; True when it (the chosen path) is accepted."""
        t, node = nodes[0]
        child = g.judge_node(t, t.parents[node], row, windows[0])
        if child == node:
            drafts.pop(0), q_rows.pop(0), windows.pop(0), nodes.pop(0)
            return True
        keep = None
        if child is not None:  # a sibling off the path: its branch goes on with the rows of a tree that holds it
            for t, start, rows in scored:
                if (below := below_cursor(t, start)) is not None:
                    g.verify_tree(t, rows, below)
                    break
            else:  # or with those of a verification still running: kept, its branch becomes the drafts
                trees = (task for task in verifying if type(task.call) is ScoreTree)
                keep = next((task for task in trees if below_cursor(task.call.tree, task.call.start) is not None), None)
        if keep is not None:
            verifying.remove(keep)  # spared by the rejection
        reject_dependents()
        if keep is not None:
            verifying.append(keep)
            t = keep.call.tree
            below = below_cursor(t, keep.call.start)
            branch = t.subtree(below)
            path = branch.path(branch.most_likely_leaf())
            drafts.extend(branch.tokens_of(path))
            nodes.extend((branch, n) for n in path)
            q_rows.extend([None] * len(path))
            windows.extend(range(t.depths[below], t.depths[below] + len(path)))
        return False

    def settle() -> bool:
        """Resolve the cursor with the target rows known for it, in position order; False on a rejection."""
        while not g.done:
            row = known.pop(len(g.out), None)
            if row is None:
                break
            if not drafts:  # no draft here yet: take the target's token now, as non-SI would
                g.take(row)
            elif nodes:
                if not judge_in_tree(row):
                    return False
            elif not g.judge(drafts.pop(0), q_rows.pop(0), row, windows.pop(0)):
                reject_dependents()
                return False
        return True

    def on_draft(task: Task) -> None:
        nonlocal drafting, unsent
        drafting = None
        result, out = task.result, g.out
        tokens, start = result.tokens, len(task.call.context)
        taken = len(out) + len(drafts) - start  # positions the target filled while we drafted
        if taken:
            if tokens[:taken] != out[start : start + taken]:
                return  # drafted from a prefix the target has since contradicted
            new = tokens[taken:]
        else:
            new = tokens
        drafts.extend(new)
        q_rows.extend(result.q[taken:] if result.q is not None else [None] * len(new))
        windows.extend(range(taken, len(tokens)))
        if len(out) not in known:  # nothing can judge the new drafts yet: hand the drafter its next chunk first
            keep_drafting()
        # the previous chunk's extra row may judge the first new draft at once
        if settle():
            unsent = min(unsent + len(new), len(drafts))
            send_drafts()

    def on_tree_draft(task: Task) -> None:
        """on_draft for a token tree: its drafts are the path to its most likely leaf (below what the target
        filled meanwhile); each remembers its tree and node, for its siblings."""
        nonlocal drafting, unsent
        drafting = None
        start, t = len(task.call.context), task.result
        taken = len(g.out) + len(drafts) - start  # positions the target filled while we drafted
        filled = t.follow(g.out[start : start + taken])
        if len(filled) < taken:
            return  # drafted from a prefix the target has since contradicted
        if taken:
            t = t.subtree(filled[-1])
        path = t.path(t.most_likely_leaf())
        new = t.tokens_of(path)
        drafts.extend(new)
        nodes.extend((t, n) for n in path)
        q_rows.extend([None] * len(new))
        windows.extend(range(taken, taken + len(new)))
        if len(g.out) not in known:  # as on_draft: the drafter's next chunk first, then what the known rows judge
            keep_drafting()
        if settle():
            unsent = min(unsent + len(new), len(drafts))
            send_drafts()

    def send_drafts() -> None:
        """Verify the drafts that wait, in one pass, if a server is free for it (the runtime queues otherwise,
        unless one server is kept for the cursor)."""
        nonlocal unsent
        if unsent and (not keep_one or sum(1 for t in verifying if t.call.n_drafts) < len(target) - 1):
            if tree is None:
                verifying.append(runtime.submit(target, Score(g.context(drafts), unsent, decoding)))
            else:  # the trees that wait, each hung below the previous one's path, below the drafts verified
                i = len(drafts) - unsent
                verifying.append(runtime.submit(target, ScoreTree(g.context(drafts[:i]), waiting_tree(i), decoding)))
            unsent = 0

    def waiting_tree(i: int) -> TokenTree:
        """One tree for the drafts from index i on: their trees, each attached at the end of the path before it."""
        out, j = TokenTree(), i
        while j < len(drafts):
            t, node = nodes[j]
            parent = t.parents[node]
            at = out.follow(drafts[i:j])[-1] if j > i else -1
            attach(out, t if parent < 0 else t.subtree(parent), at)
            j += sum(1 for t_j, _ in nodes[j:] if t_j is t)
        return out

    def on_scores(task: Task) -> None:
        nonlocal unsent, warmed
        if task in warming:
            warming.discard(task)
            warmed += 1
        else:
            verifying.remove(task)
        start, rows = task.result.start, task.result.rows
        if tree is not None and type(task.call) is ScoreTree:  # rows along the drafts' path; the others wait
            t = task.call.tree
            scored.append((t, start, rows))
            cursor = len(g.out)  # drafts[i] is at position cursor + i; the tree hangs at start (either side of it)
            path = t.follow(g.out[start:] + drafts if start <= cursor else drafts[start - cursor :])
            rows = [rows[0], *(rows[1 + n] for n in path)]
        for i in range(max(0, len(g.out) - start), len(rows)):  # rows at the cursor and beyond
            known[start + i] = rows[i]
        if settle():
            unsent = min(unsent, len(drafts))  # the cursor's pass may have judged drafts that waited

    def cover_cursor() -> None:
        """A target works on (or already knows) the cursor; tasks wholly behind it are dropped."""
        cursor = len(g.out)
        while verifying and verifying[0].call.end < cursor:
            runtime.cancel(verifying.pop(0))  # every row it would give is already behind the cursor
        if cursor in known:
            return
        if not keep_one:  # a verification that covers the cursor stands in for a pass on it
            if verifying and verifying[0].call.start <= cursor:
                return
            verifying.insert(0, runtime.submit(target, Score(g.context(), 0, decoding)))
            return
        behind = 0  # tasks from before the cursor, first in `verifying`
        while behind < len(verifying) and verifying[behind].call.start < cursor:
            behind += 1
        if not any(t.call.start == cursor and not t.call.n_drafts for t in verifying[behind:]):
            verifying.insert(behind, runtime.submit(target, Score(g.context(), 0, decoding)))

    def keep_drafting() -> None:
        """The drafter (free: ``drafting`` is None) drafts the next chunk after the last draft."""
        nonlocal drafting
        k = g.lookahead_at(len(g.out) + len(drafts), lookahead)
        if k:
            drafting = runtime.submit(drafter, draft_call(g.context(drafts), k, decoding))

    on_drafted = on_draft if tree is None else on_tree_draft
    warm_up = prefill_all
    while not g.done:
        # before every event: the invariants that make DSI never slower than non-SI, and drafting ahead
        cover_cursor()
        if drafting is None:
            keep_drafting()
        if unsent:
            send_drafts()
        if warm_up:  # once, at the start
            warming.update(runtime.submit(target, Score(g.context(), 0, decoding)) for _ in range(len(target) - 1))
            warm_up = False
        task = runtime.wait()
        if task is drafting:
            on_drafted(task)
        else:
            on_scores(task)
    return g.result("dsi", lookahead=lookahead, sp_degree=len(target), warm_ups=warmed)
