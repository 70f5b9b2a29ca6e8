"""The state every algorithm shares: the verified sequence, how tokens enter it, and the metrics."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specpar.algorithms.verification import bonus, judge, judge_siblings, verify_chain, verify_tree
from specpar.core.calls import Context, Proposal, Scores
from specpar.core.errors import ConfigError
from specpar.core.logits_processors import token_logprob
from specpar.core.numbers import positive_int
from specpar.core.query import Query
from specpar.core.results import GenerationResult
from specpar.runtimes.base import Runtime


class Generation:
    """One generation of ``query`` on ``runtime`` (whose clock times it): prompt + verified output tokens, and the
    record of how they were obtained. Tokens enter only through :meth:`take` (the target's own), :meth:`test_draft`
    (the paper's judge of one draft), :meth:`test_node`, :meth:`verify` and :meth:`verify_tree`, thin wrappers over
    :mod:`specpar.algorithms.verification` that also keep the metrics. feedback: None, or the proposer's hook,
    called with (index in its window, accepted) for every draft tested."""

    def __init__(self, query: Query, runtime: Runtime):
        prompt, max_tokens, decoding = query.prompt, query.max_tokens, query.decoding
        if len(prompt) == 0:
            raise ConfigError("prompt is empty: give at least one token (the target needs a prefix to continue)")
        positive_int("max_tokens (N)", max_tokens)
        self.out: list[int] = list(prompt)
        self.prompt_len = len(prompt)
        self.max_tokens = max_tokens
        self.stop = len(prompt) + max_tokens  # where the output ends: moved back by a stop token or string
        self.done = False  # len(out) >= stop: every output token is verified
        self.stopping = query.stopping
        self.finish_reason = "length"
        self.decoding = decoding
        self.runtime = runtime
        self.t0 = runtime.now()
        self.first_token_ms: float | None = None
        self.accepted_per_round: list[int] = []
        self.position_drafted: list[int] = []
        self.position_accepted: list[int] = []
        self._run = 0  # accepted drafts since the last target token
        self._last: Context | None = None  # the Context context() made last
        self.stream = query.stream  # called with each run of newly verified output tokens, in order
        self.feedback: Callable[[int, bool], None] | None = None
        self._streamed = len(prompt)
        # each output token's log-probability from the target's row it came from (decoding.logprobs asks for them)
        self.logprobs: list | None = None if decoding.logprobs is None else []

    def context(self, drafts: Sequence[int] = ()) -> Context:
        """The verified sequence followed by ``drafts``, for a call: a :class:`Context` that shares ``out`` (which
        only grows), in O(len(drafts)); the last one again for the same drafts (DSI asks twice about half the time)."""
        n, tail = len(self.out), tuple(drafts)
        last = self._last
        if last is None or last.n != n or last.tail != tail:
            self._last = last = Context(self.out, n, tail)
        return last

    def lookahead_at(self, position: int, lookahead: int) -> int:
        """Drafts worth proposing from ``position``: never the last output token (the target makes it)."""
        room = self.stop - 1 - position
        return lookahead if room >= lookahead else (room if room > 0 else 0)

    def take(self, row) -> int:
        """Append the target's own token from its row at the cursor (non-SI step, bonus)."""
        token = bonus(row, self.decoding, len(self.out))
        self._append(token, row)
        self._end_round()
        self._emit()
        return token

    def test_draft(self, draft: int, q_row, row, index: int) -> bool:
        """Test the draft at the cursor against the target's row there (the paper's judge); append the kept
        token. index: its place in its lookahead window."""
        accepted, token = judge(draft, q_row, row, self.decoding, len(self.out))
        self._tested(index, accepted)
        self._append(token, row)
        if not accepted:
            self._end_round()
        if self.stream is not None:
            self._emit()
        return accepted

    def verify(self, proposal: Proposal, scores: Scores) -> int:
        """Test a whole chain of drafts at the cursor (SI); returns how many were accepted."""
        n, token = verify_chain(proposal.tokens, proposal.q, scores.rows, self.decoding, len(self.out))
        for j in range(min(n + 1, len(proposal.tokens))):
            self._tested(j, j < n)
        self._accept(proposal.tokens[:n], scores.rows, token, scores.rows[n])
        return n

    def verify_tree(self, tree, rows, node: int = -1) -> int:
        """Test a token tree hanging off the cursor (SI over trees; DSI below an accepted ``node``) with the
        target's rows from one pass (rows[0] at the root, rows[1 + i] after node i); appends the accepted path and
        the token after it. Returns how many nodes were accepted."""
        base = tree.depths[node] if node >= 0 else 0
        path, token = verify_tree(tree, rows, self.decoding, len(self.out) - base, node)
        for j in range(len(path) + 1):
            if tree.draws.get(path[j - 1] if j else node):  # a level was tested
                self._tested(base + j, j < len(path))
        parents = [rows[parent + 1] for parent in [node, *path]]  # an accepted node's row is its parent's
        self._accept([tree.tokens[n] for n in path], parents, token, parents[-1])
        return len(path)

    def _accept(self, drafts: Sequence[int], rows, token: int, row) -> None:
        """Append the accepted ``drafts`` (each from its row of ``rows``), then the target's ``token`` from ``row``
        unless one ended the output; end the round."""
        if self.stopping is None and self.logprobs is None:
            self.out.extend(drafts)
        else:  # each accepted draft may end the output
            for x, r in zip(drafts, rows):
                self._append(x, r)
                if self.done:
                    break
        if not self.done:
            self._append(token, row)  # also updates done
        self._end_round()
        self._emit()

    def test_node(self, tree, parent: int, row, index: int) -> int | None:
        """Test the draws under ``parent`` of a token tree at the cursor (DSI, one position at a time); appends
        the kept token and returns the accepted child (None when every draw failed)."""
        child, token = judge_siblings(tree.draws.get(parent, ()), tree.tokens, row, self.decoding, len(self.out))
        self._tested(index, child is not None)
        self._append(token, row)
        if child is None:
            self._end_round()
        self._emit()
        return child

    def _emit(self) -> None:
        """Hand the newly verified tokens (never past max_tokens) to ``stream``."""
        if self.stream is not None:
            end = min(len(self.out), self.stop)
            if end > self._streamed:
                self.stream(self.out[self._streamed : end])
                self._streamed = end

    def _append(self, token: int, row=None) -> None:
        """Append ``token``, decided from the target's ``row`` at its position (recorded when logprobs are on)."""
        if self.first_token_ms is None:
            self.first_token_ms = self.runtime.now() - self.t0
        if self.logprobs is not None:
            token = int(token)  # a LoggedArgmax row carries its log-probabilities: keep the id alone
            self.logprobs.append(token_logprob(token, row, self.decoding.logprobs))
        self.out.append(token)
        if self.stopping is not None and self.stopping.stops_at(token):
            self.stop = len(self.out)  # the output ends here: no later token is kept, no more work is scheduled
            self.finish_reason = "stop"
        self.done = len(self.out) >= self.stop

    def _tested(self, index: int, accepted: bool) -> None:
        drafted = self.position_drafted
        if index >= len(drafted):
            grow = index + 1 - len(drafted)
            drafted += [0] * grow
            self.position_accepted += [0] * grow
        drafted[index] += 1
        if accepted:
            self.position_accepted[index] += 1
            self._run += 1
        if self.feedback is not None:
            self.feedback(index, accepted)

    def _end_round(self) -> None:
        self.accepted_per_round.append(self._run)
        self._run = 0
        if self.stopping is not None and self.stopping.pauses_here():
            # a safe point (the target's own token ends the round: nothing verified waits): the output ends here
            # and whoever asked for the pause goes on from it (specpar.scheduling.pausing)
            self.stop = len(self.out)
            self.done = True

    def result(
        self, algorithm: str, lookahead: int | None = None, sp_degree: int = 1, warm_ups: int = 0
    ) -> GenerationResult:
        """warm_ups: completed target tasks that only prefilled a replica (not verifications)."""
        rt = self.runtime
        end = rt.now()
        rt.cancel_all()
        target_forwards = drafter_forwards = 0
        for t in rt.tasks:
            if t.result is not None and not t.cancelled:  # completed (a result is set only then)
                if t.call.kind == "draft":
                    drafter_forwards += t.call.k
                else:
                    target_forwards += 1
        if self._run:
            self._end_round()
        drafted = sum(self.position_drafted)
        accepted = sum(self.position_accepted)
        return GenerationResult(
            algorithm=algorithm,
            runtime=rt.name,
            tokens=self.out[self.prompt_len : self.stop],
            time_ms=end - self.t0,
            ttft_ms=self.first_token_ms,
            target_forwards=target_forwards,
            drafter_forwards=drafter_forwards,
            drafted=drafted,
            accepted=accepted,
            verifications=target_forwards - warm_ups,
            accepted_per_round=self.accepted_per_round,
            position_drafted=self.position_drafted,
            position_accepted=self.position_accepted,
            lookahead=lookahead,
            sp_degree=sp_degree,
            finish_reason=self.finish_reason,
            logprobs=None if self.logprobs is None else self.logprobs[: self.stop - self.prompt_len],
            timeline_source=lambda: rt.timeline(since=self.t0),
        )
