"""A request's stop conditions plus the scheduler's pause: how a request changes configuration without losing a
token.

The scheduler asks a running request to pause when its share changes (:meth:`Pausable.ask`). The generation ends
at its next safe point: the end of a round, where the target's own token has just entered the output, so nothing
verified waits and what is in flight is only speculation (``Generation._end_round`` asks :meth:`pauses_here`); where
rounds run long, after PATIENCE more tokens (:meth:`stops_at`). Going on from the verified output is exact:
greedy tokens are the target's, and every draw is keyed by its position (:mod:`specpar.core.decoding`), so with the
"gumbel" coupling a seed gives the same tokens across the change (with rejection sampling, the same distribution).
"""

from __future__ import annotations

from specpar.core.stopping import Stopping

PATIENCE = 16  # tokens after a pause was asked for, at most, when no round ends


class Pausable(Stopping):
    """``inner`` (the request's own :class:`Stopping`, or None) plus a pause the scheduler may ask for.

    paused: the last generation ended at a pause (it goes on). stopped: ``inner`` ended the output.
    """

    def __init__(self, inner: Stopping | None = None):
        self.inner = inner
        self.asked = False
        self.paused = False
        self.stopped = False
        self._waited = 0

    def ask(self) -> None:
        """Pause at the next safe point (from any thread)."""
        self.asked = True

    def arm(self) -> None:
        """A new generation starts: no pause yet (the scheduler asks again if it still wants one)."""
        self.asked = self.paused = False
        self._waited = 0

    def pauses_here(self) -> bool:
        if self.asked:
            self.asked, self.paused = False, True
            return True
        return False

    def stops_at(self, token: int) -> bool:
        if self.inner is not None and self.inner.stops_at(token):
            self.stopped = True
            return True
        if self.asked:
            self._waited += 1
            if self._waited >= PATIENCE:  # no round has ended for a while: pause at this token
                self.asked, self.paused = False, True
                return True
        return False
