"""Read the next master partition while the current step joins: a prefetching :class:`MasterScan`.

After partition ``p`` is handed out, partitions ``(p + 1) mod k`` .. ``(p + depth) mod k``
(the operator's scan order) are read by one background thread, one at a time, into a
queue of at most ``depth`` tables. A request for the partition at the head of the queue
takes it (waiting if its read is still running); any other request (the first read, a
restore, a repartition, a new R-cycle with another k, a retry after an error) reads
synchronously and discards the queue, so the operator sees exactly the partitions it asks
for. Only one read of the wrapped scan runs at a time (its connections and counters are
not shared between reads).

An error of a background read is raised, as the same exception object (a
:class:`~ssbj.errors.TransientError` stays transient), by the ``read_partition`` call that
asks for that partition; the queue is then discarded, so the retry reads synchronously.

Memory: the queued tables are counted at their ``nbytes`` (:meth:`prefetched_nbytes`, part
of the operator's memory report), and the budget reserves ``depth`` disk buffers for them
(:func:`ssbj.core.budget.fixed_bytes`, :func:`ssbj.core.costmodel.plan_memory`).

Freshness: a prefetched partition is read when the partition before it is handed out, so
it is at most ``depth`` steps older than a synchronous read would be (one step with the
default depth 1); the one-R-cycle bound on cached rows becomes one R-cycle plus ``depth``
steps.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ssbj.contracts import MasterScan
from ssbj.core.scanwrap import WrappedScan
from ssbj.errors import ConfigError, StateError

__all__ = ["PrefetchingScan", "prefetch_depth", "prefetched_nbytes", "read_seconds"]


@dataclass(eq=False)
class _Slot:
    """One partition ahead: queued, being read, or read (table or error)."""

    p: int
    k: int
    done: bool = False
    discarded: bool = False
    table: pa.Table | None = None
    error: BaseException | None = None
    t0: float = 0.0
    t1: float = 0.0


@dataclass
class _Stats:
    hits: int = 0  # partitions handed out from the queue
    misses: int = 0  # partitions read synchronously
    discarded: int = 0  # prefetched (or queued) partitions thrown away
    peak_nbytes: int = 0  # most bytes the queue held
    events: deque[tuple[str, int, float, float]] = field(default_factory=lambda: deque(maxlen=4096))


class PrefetchingScan(WrappedScan):
    """A master scan that reads up to ``depth`` partitions ahead in a daemon thread (``depth`` 0: off)."""

    def __init__(self, scan: MasterScan, depth: int = 1) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ConfigError(f"prefetch depth must be an integer >= 0, got {depth!r}")
        super().__init__(scan)
        self.depth = depth
        self._io = threading.Lock()  # one read of the wrapped scan at a time
        self._cond = threading.Condition()  # guards _slots, _worker, _closed
        self._slots: deque[_Slot] = deque()  # ahead, in scan order, until handed out
        self._todo: deque[_Slot] = deque()  # not yet read (a slot handed out early stays here)
        self._worker: threading.Thread | None = None
        self._closed = False
        self.stats = _Stats()
        self.last_wait = 0.0  # seconds the last read_partition call took (what the step waited)
        self.last_read = 0.0  # seconds the read of the partition it returned took (in whichever thread)

    def _wrap_lookup(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        # a lookup waits for a read in flight (one use of the wrapped scan at a time)
        def lookup(*args: Any, **kwargs: Any) -> Any:
            with self._io:
                return fn(*args, **kwargs)

        return lookup

    def read_partition(self, p: int) -> pa.Table:
        """Partition ``p``: from the queue if it is next there, else read now; then read ahead."""
        t_call = time.perf_counter()
        k = self._scan.num_partitions()
        slot: _Slot | None = None
        with self._cond:
            if self._closed:
                raise StateError("read_partition on a closed prefetching scan")
            if self._slots and self._slots[0].p == p and self._slots[0].k == k:
                slot = self._slots.popleft()
                while not slot.done:
                    self._cond.wait()
            else:
                self._discard_locked()
        if slot is not None:
            if slot.error is not None:
                with self._cond:
                    self._discard_locked()  # the retry reads synchronously
                raise slot.error
            assert slot.table is not None  # noqa: S101  (done without error means a table)
            table, read_s = slot.table, slot.t1 - slot.t0
            self.stats.hits += 1
        else:
            with self._io:
                t0 = time.perf_counter()
                table = self._scan.read_partition(p)
                t1 = time.perf_counter()
            read_s = t1 - t0
            self.stats.misses += 1
            self.stats.events.append(("sync", p, t0, t1))
        self.last_read = read_s
        self._schedule(p, k)
        self.last_wait = time.perf_counter() - t_call
        return table

    def repartition(self, partition_rows: int) -> PrefetchingScan:
        """Return the wrapped scan repartitioned, prefetched at the same depth (this scan stays as it is)."""
        return PrefetchingScan(self._scan.repartition(partition_rows), self.depth)

    # ------------------------------------------------------------ state
    def prefetched_nbytes(self) -> int:
        """Bytes of the partitions read ahead and not yet handed out."""
        with self._cond:
            return self._held_locked()

    def settle(self, timeout: float | None = None) -> None:
        """Wait until every queued read has finished (for measurements and tests)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while any(not s.done for s in self._slots):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                self._cond.wait(left)

    def close(self, timeout: float = 60.0) -> None:
        """Discard the queue, wait for a running read to end, then close the wrapped scan if it can be."""
        with self._cond:
            self._closed = True
            self._discard_locked()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)
        super().close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def worker_alive(self) -> bool:
        """Whether a background read thread exists right now."""
        with self._cond:
            return self._worker is not None and self._worker.is_alive()

    def __enter__(self) -> PrefetchingScan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ internals
    def _held_locked(self) -> int:
        return sum(int(s.table.nbytes) for s in self._slots if s.table is not None)

    def _discard_locked(self) -> None:
        self.stats.discarded += len(self._slots)
        for s in self._slots:
            s.discarded = True  # a read under way finishes into a slot no one holds
        self._slots.clear()
        self._todo.clear()

    def _schedule(self, p: int, k: int) -> None:
        if self.depth == 0:
            return
        with self._cond:
            if self._closed:
                return
            last = self._slots[-1].p if self._slots else p
            while len(self._slots) < self.depth:
                last = (last + 1) % k
                slot = _Slot(last, k)
                self._slots.append(slot)
                self._todo.append(slot)
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="ssbj-prefetch", daemon=True)
                self._worker.start()

    def _run(self) -> None:
        """Read queued partitions in order; exit when none is left (a new one starts the thread again)."""
        while True:
            with self._cond:
                if not self._todo or self._closed:
                    self._worker = None
                    self._cond.notify_all()
                    return
                slot = self._todo.popleft()
            with self._io:
                with self._cond:
                    stale = slot.discarded
                if not stale:
                    slot.t0 = time.perf_counter()
                    try:
                        slot.table = self._scan.read_partition(slot.p)
                    except BaseException as e:
                        slot.error = e
                    slot.t1 = time.perf_counter()
            with self._cond:
                slot.done = True
                if slot.discarded:
                    slot.table = None  # discarded while it was read
                else:
                    self.stats.events.append(("prefetch", slot.p, slot.t0, slot.t1))
                    self.stats.peak_nbytes = max(self.stats.peak_nbytes, self._held_locked())
                self._cond.notify_all()


def prefetched_nbytes(scan: object) -> int:
    """Bytes a scan holds read ahead (0 for a scan that does not prefetch)."""
    f = getattr(scan, "prefetched_nbytes", None)
    return int(f()) if callable(f) else 0


def prefetch_depth(scan: object) -> int:
    """Partitions a scan reads ahead (0 for a scan that does not prefetch)."""
    return int(getattr(scan, "depth", 0) or 0) if hasattr(scan, "prefetched_nbytes") else 0


def read_seconds(scan: object, waited: float) -> float:
    """Seconds the read of the partition just returned took; ``waited`` for a scan that does not say."""
    v = getattr(scan, "last_read", None)
    return float(v) if isinstance(v, int | float) else waited
