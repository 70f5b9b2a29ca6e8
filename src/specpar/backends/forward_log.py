"""``ForwardLog``: when a server's latest forward passes ran, in bounded memory however long it serves."""

from __future__ import annotations

import numpy as np

DEFAULT_CAPACITY = 1 << 15  # passes held: 512 KiB; more than any one request's passes on one server


class ForwardLog:
    """The (start, end) ``time.perf_counter()`` times (s) of a server's forward passes, numbered 0, 1, ..., of which
    the latest ``capacity`` are held (a ring). A reader marks ``n = len(log)`` before a request and reads
    ``log.since(n)`` (or ``log[n:]``) after it: every pass since, when at most ``capacity`` ran."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self._times = np.empty((capacity, 2))
        self._count = 0

    def append(self, interval: tuple[float, float]) -> None:
        self._times[self._count % len(self._times)] = interval
        self._count += 1

    def __len__(self) -> int:
        return self._count

    def since(self, n: int) -> list[tuple[float, float]]:
        """(start, end) of every pass from number ``n`` on that the ring still holds, in order."""
        capacity = len(self._times)
        first = max(n, self._count - capacity, 0)
        rows = [self._times[i % capacity] for i in range(first, self._count)]
        return [(float(a), float(b)) for a, b in rows]

    def __getitem__(self, item: slice) -> list[tuple[float, float]]:
        if not isinstance(item, slice) or item.stop is not None or item.step is not None:
            raise TypeError("a ForwardLog is read from a pass number on: log[n:] (or log.since(n))")
        return self.since(item.start or 0)

    def __repr__(self) -> str:
        return f"ForwardLog({self._count} passes, the last {min(self._count, len(self._times))} held)"
