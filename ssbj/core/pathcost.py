"""Measured costs of the hybrid step's two paths (docs/hybrid.md): a partition read and a lookup.

The cost model's default constants price a master held in memory (30 ns a row read). A
database costs ~1 us a row read and ~10 us a key looked up (MariaDB,
bench/results/lookup_batch.md), so with the defaults the per-step choice of ``hybrid:
auto`` scans where a lookup is cheaper. An operator given no cost constants therefore
prices each path by what it measured on its own master: seconds per row of a partition
read (the read, not the probe, which the model prices), and seconds per key of a lookup
(the round trips, the rows and the join of them), each the median of the last ``WINDOW``
measurements. A path not yet measured is priced by the model.

A path is measured only when it is taken, so one slow measurement (a cold statement, a
busy machine) could keep a path out for good. :meth:`PathCosts.choose` therefore takes
the dearer path once after it has lost ``RETRY`` decisions in a row, and waits twice as
long each time it loses again (a lookup without an index reads all of R: its retries
stay rare).

Not checkpointed: the choice of path never changes the result, only its cost, and after
a restore both paths are measured again.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from ssbj.core.costmodel import CostModel

WINDOW = 16  # measurements kept per path
MIN_ROWS = 64  # a read of fewer rows is not a measurement of the per-row cost
RETRY = 8  # decisions a path loses in a row before it is taken once to be measured again


@dataclass
class PathCosts:
    """Seconds per row read and per key looked up, as measured."""

    per_row: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    per_key: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    lost: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})  # in a row (True: lookup)
    retry: dict[bool, int] = field(default_factory=lambda: {True: RETRY, False: RETRY})

    def choose(self, lookup_cheaper: bool) -> bool:
        """Return whether to look up: the cheaper path, or the other once it has lost ``retry`` in a row."""
        win, lose = lookup_cheaper, not lookup_cheaper
        self.lost[win] = 0
        self.retry[win] = RETRY
        self.lost[lose] += 1
        if self.lost[lose] < self.retry[lose]:
            return win
        self.lost[lose] = 0
        self.retry[lose] *= 2  # if it loses again, it waits twice as long
        return lose

    def note_read(self, rows: int, seconds: float) -> None:
        """Record that a partition read of ``rows`` rows took ``seconds``."""
        if rows >= MIN_ROWS and seconds >= 0:
            self.per_row.append(seconds / rows)

    def note_lookup(self, keys: int, seconds: float) -> None:
        """Record that a lookup of ``keys`` distinct keys took ``seconds``, joining its rows included."""
        if keys > 0 and seconds >= 0:
            self.per_key.append(seconds / keys)

    def scan_cost(self, model: CostModel, b: float) -> float:
        """Seconds to read a partition of ``b`` rows and probe H_S with it."""
        if not self.per_row:
            return model.scan_cost(b)
        k = model.k
        return b * statistics.median(self.per_row) + 1e-9 * b * (k.c_h + k.c_b)

    def lookup_cost(self, model: CostModel, keys: int, rows: float, batch: int) -> float:
        """Seconds to look up ``keys`` distinct keys (``rows`` master rows), ``batch`` keys per round trip."""
        if not self.per_key:
            return model.lookup_cost(keys, rows, batch)
        return keys * statistics.median(self.per_key)
