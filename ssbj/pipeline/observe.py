"""Seams for watching a running job without patching it: every operator step, every partition read.

Benchmarks and progress output pass a :class:`StepObserver` to the processor (or to
``EnrichmentJob(observer=...)``); the processor calls it after every step and wraps the
master scan so that each partition read is reported with its rows and seconds.
"""

from __future__ import annotations

import time
from typing import Protocol

import pyarrow as pa

from ssbj.contracts import CheckpointedMasterScan
from ssbj.core.operator import StepResult
from ssbj.core.prefetch import prefetch_depth, prefetched_nbytes
from ssbj.core.scanwrap import WrappedScan


class StepObserver(Protocol):
    """Called by the processor; each method must be cheap (it runs on the job's thread)."""

    def on_step(self, result: StepResult) -> None:
        """Receive the result of one operator step (one iteration of Algorithm 1)."""
        ...

    def before_partition_read(self, partition: int) -> None:
        """Note that the operator is about to read ``partition`` of R."""
        ...

    def after_partition_read(self, partition: int, rows: int, seconds: float) -> None:
        """Note that partition ``partition`` of R was read: ``rows`` rows in ``seconds``."""
        ...


class ObservedScan(WrappedScan):
    """A master scan that reports each partition read to an observer; everything else is delegated."""

    def __init__(self, scan: CheckpointedMasterScan, observer: StepObserver) -> None:
        super().__init__(scan)
        self._observer = observer

    def read_partition(self, p: int) -> pa.Table:
        """Read partition ``p``, reporting it before and after."""
        self._observer.before_partition_read(p)
        t0 = time.perf_counter()
        table = self._scan.read_partition(p)
        self._observer.after_partition_read(p, table.num_rows, time.perf_counter() - t0)
        return table

    # the operator counts (and the budget reserves) partitions read ahead by a wrapped prefetching scan
    @property
    def depth(self) -> int:
        """Partitions the wrapped scan reads ahead."""
        return prefetch_depth(self._scan)

    def prefetched_nbytes(self) -> int:
        """Bytes the wrapped scan holds read ahead."""
        return prefetched_nbytes(self._scan)

    @property
    def last_read(self) -> float | None:
        """Seconds the wrapped scan's last read took (None if it does not say)."""
        v = getattr(self._scan, "last_read", None)
        return float(v) if isinstance(v, int | float) else None

    def repartition(self, partition_rows: int) -> ObservedScan:
        """Return the same R with another b, still observed."""
        scan = self._scan.repartition(partition_rows)
        assert isinstance(scan, CheckpointedMasterScan)  # noqa: S101  (a checkpointed scan repartitions to one)
        return ObservedScan(scan, self._observer)


class FanOut:
    """Several observers as one, called in order."""

    def __init__(self, *observers: StepObserver) -> None:
        self._observers = observers

    def on_step(self, result: StepResult) -> None:
        """Pass the step on."""
        for o in self._observers:
            o.on_step(result)

    def before_partition_read(self, partition: int) -> None:
        """Pass the coming read on."""
        for o in self._observers:
            o.before_partition_read(partition)

    def after_partition_read(self, partition: int, rows: int, seconds: float) -> None:
        """Pass the finished read on."""
        for o in self._observers:
            o.after_partition_read(partition, rows, seconds)
