"""The exactly-once life of a join processor, shared by the single-table and multi-way jobs.

Exactly once comes from three rules:

1. the sink replaces everything written under (batch id, segment), so writing a batch
   again never duplicates rows;
2. the operator's state is checkpointed after the sink write, under the batch id, with
   the job's counters (and what the job kind adds) in the same manifest;
3. a batch whose id is not newer than the last checkpoint is a replay: the state rolls
   back to the checkpoint before it, and the batch is processed again.

Steps run after batch N while the stream is idle (or at the end of an ``available-now``
run) form segments 1, 2, ... of batch N; they run only once Spark has committed N, so
a replay never meets them.

A job kind supplies its operator (fresh, restored, checkpointed, stepped) through the
abstract methods below; :meth:`JoinProcessor.process` and :meth:`JoinProcessor.drain` are
the one order of decode, join, write, count and checkpoint.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa

from ssbj.contracts import DEAD_LETTER_SCHEMA, RunCounts, WarehouseSink
from ssbj.core.checkpoint import DirectoryStore
from ssbj.errors import StateError
from ssbj.logs import fields
from ssbj.pipeline import faults
from ssbj.pipeline.partwriter import PartWriter, parts_sink
from ssbj.pipeline.records import Decoded
from ssbj.pipeline.replay import rollback_before

log = logging.getLogger("ssbj.progress")

Got = TypeVar("Got")
"""What a batch's ``decode`` returns for the job kind."""

Emit = Callable[[pa.Table], None] | None
"""Where a job kind that writes step by step hands each step's output (None: written whole after the join)."""


@dataclass
class Joined:
    """One batch's (or drain's) work: what it read, what it wrote, and how it got there."""

    records: int  # records read (decoded rows + decoding's dead letters)
    decoded: Decoded  # the stream rows fed and every dead letter of the batch
    out: pa.Table
    steps: list[Any]  # the operator's step results (job kind's own type)

    @property
    def dead(self) -> pa.Table:
        """The batch's dead letters."""
        return self.decoded.dead


class BatchTotals(Protocol):
    """The counters every job kind keeps over its life (restored from the checkpoint)."""

    records_in: int
    decoded_rows: int
    dead_letters: int
    batches: int


class JoinProcessor(ABC, Generic[Got]):
    """Drives one job's operator one micro-batch at a time, with idempotent sinks."""

    totals: BatchTotals

    emits_steps = False  # _join and _drain_steps hand each step's output to emit (a sink may load it meanwhile)

    def __init__(self, sink: WarehouseSink, dead_letters: WarehouseSink, store: DirectoryStore) -> None:
        self.sink = sink
        self.dead_letter_sink = dead_letters
        self.store = store
        self.lock = threading.RLock()
        self.last_batch: int | None = None  # batch id of the newest checkpoint
        self.segment = 0
        self.token: str | None = None  # the newest checkpoint's generation: this state wrote or restored it
        self.last_progress: dict[str, Any] = {}
        self._prepared = False
        self._last_batch_end = time.time()
        self._write_seconds = 0.0

    # ------------------------------------------------------------------ the job kind's operator
    @abstractmethod
    def _live(self) -> bool:
        """Whether an operator is in memory."""

    @abstractmethod
    def _fresh(self) -> None:
        """Start with no state (last_batch None, segment 0, zero totals)."""

    @abstractmethod
    def _restore(self, checkpoint_id: int) -> None:
        """Load checkpoint ``checkpoint_id`` (operator, last_batch, segment, totals)."""

    @abstractmethod
    def _forget(self) -> None:
        """Drop the in-memory operator."""

    @abstractmethod
    def _output_schema(self) -> pa.Schema:
        """Return the warehouse rows' schema."""

    @abstractmethod
    def _save(self, store: DirectoryStore, batch_id: int, meta: dict[str, Any]) -> None:
        """Checkpoint the operator into ``store`` under ``batch_id`` with ``meta`` in its manifest."""

    @abstractmethod
    def _manifest(self) -> dict[str, Any]:
        """Return the job kind's fields of the manifest (layouts, plans, totals)."""

    @abstractmethod
    def _join(self, got: Got, emit: Emit) -> Joined:
        """Feed a decoded batch to the operator and step it."""

    @abstractmethod
    def _waiting(self) -> int:
        """Tuples (or rows) a drain would finish."""

    @abstractmethod
    def _drain_steps(self, emit: Emit) -> Joined:
        """Finish the waiting tuples' R-cycles."""

    @abstractmethod
    def _add_output(self, rows: int) -> None:
        """Add ``rows`` output rows written to the job kind's totals."""

    @abstractmethod
    def _progress(self, progress: dict[str, Any], batch: Joined) -> str:
        """Add the job kind's fields to ``progress``; return the log line's tail."""

    @abstractmethod
    def counts(self) -> RunCounts:
        """Return the job's counts so far (they reconcile: :attr:`RunCounts.reconciled`)."""

    # ------------------------------------------------------------------ state
    def open(self) -> None:
        """Restore the newest checkpoint, or start fresh."""
        with self.lock:
            latest = self.store.latest()
            if latest is None:
                self._fresh()
            else:
                self._restore(latest)
            self._prepare_sinks()

    def _prepare_sinks(self) -> None:
        if self._prepared or not self._live():
            return
        self.sink.prepare(self._output_schema())
        self.dead_letter_sink.prepare(DEAD_LETTER_SCHEMA)
        self._prepared = True

    def _count(self, batch: Joined, segment: int) -> None:
        """Add a written batch (segment 0) or drain (segment > 0) to the totals."""
        if segment == 0:
            t = self.totals
            t.records_in += batch.records
            t.decoded_rows += batch.decoded.rows.num_rows
            t.dead_letters += batch.dead.num_rows
            t.batches += 1
        self._add_output(batch.out.num_rows)

    def _rollback_before(self, batch_id: int) -> None:
        rollback_before(self.store, batch_id, self._restore, self._fresh, log)

    def _checkpoint(self, batch_id: int, segment: int) -> None:
        token = uuid.uuid4().hex
        meta = {
            "batch_id": batch_id,
            "segment": segment,
            "token": token,
            **self._manifest(),
            "counts": self.counts().to_dict(),  # what a driver sums over shards without restoring them
        }
        self._save(faults.store_for(self.store, batch_id), batch_id, meta)
        self.last_batch, self.segment, self.token = batch_id, segment, token

    def reset(self) -> None:
        """Forget the in-memory state: the next batch reloads the newest checkpoint (after a failed batch)."""
        with self.lock:
            self._forget()

    def position(self) -> tuple[int, int]:
        """(batch id, segment) of the newest checkpoint; (-1, 0) before the first batch."""
        return (self.last_batch if self.last_batch is not None else -1, self.segment)

    # ------------------------------------------------------------------ batches
    def process(self, batch_id: int, decode: Callable[[], Got]) -> dict[str, Any]:
        """Process micro-batch ``batch_id``, whose records ``decode`` returns."""
        with self.lock:
            t0 = time.perf_counter()
            if not self._live():
                self.open()
            if self.last_batch is not None and batch_id <= self.last_batch:
                self._rollback_before(batch_id)
                self._prepare_sinks()
            got = decode()
            faults.crash_point("after-decode", batch_id)
            t1 = time.perf_counter()
            batch = self._written(batch_id, 0, lambda emit: self._join(got, emit))
            t2 = time.perf_counter()
            self.dead_letter_sink.write(batch_id, 0, batch.dead)
            faults.crash_point("after-sink", batch_id)
            t3 = time.perf_counter()
            self._count(batch, 0)
            self._checkpoint(batch_id, 0)
            faults.crash_point("after-checkpoint", batch_id)
            t4 = time.perf_counter()
            w = self._write_seconds
            seconds = {"decode": t1 - t0, "join": t2 - t1 - w, "write": t3 - t2 + w, "checkpoint": t4 - t3}
            return self._report("batch", batch_id, 0, batch, seconds)

    def drain(self, is_committed: Callable[[int], bool]) -> dict[str, Any] | None:
        """Finish every waiting tuple's R-cycle as a new segment of the last committed batch."""
        with self.lock:
            if not self._live():
                self.open()
            if self.last_batch is None or self._waiting() == 0 or not is_committed(self.last_batch):
                return None
            t0 = time.perf_counter()
            segment = self.segment + 1
            batch = self._written(self.last_batch, segment, self._drain_steps)
            t2 = time.perf_counter()
            t1 = t2 - self._write_seconds
            self._count(batch, segment)
            self._checkpoint(self.last_batch, segment)
            t3 = time.perf_counter()
            seconds = {"join": t1 - t0, "write": t2 - t1, "checkpoint": t3 - t2}
            return self._report("drain", self.last_batch, segment, batch, seconds)

    def _written(self, batch_id: int, segment: int, work: Callable[[Emit], Joined]) -> Joined:
        """Run ``work`` and write its output as (batch_id, segment).

        Step by step while it runs where the sink loads parts (``sink.overlap``: one
        transaction in a thread), else whole after it. ``_write_seconds``: the time spent
        writing (or waiting for the writer) after ``work`` returned.
        """
        sink = parts_sink(self.sink) if self.emits_steps else None
        if sink is None:
            batch = work(None)
            t = time.perf_counter()
            self.sink.write(batch_id, segment, batch.out)
            self._write_seconds = time.perf_counter() - t
            return batch
        writer = PartWriter(sink, batch_id, segment)
        try:
            batch = work(writer.put)
            if writer.rows != batch.out.num_rows:  # the parts are the output, step by step: else roll back
                raise StateError(f"batch {batch_id}.{segment}: parts of {writer.rows} rows for {batch.out.num_rows}")
            t = time.perf_counter()
            writer.finish()
            self._write_seconds = time.perf_counter() - t
        except BaseException:
            writer.abort()
            raise
        return batch

    # ------------------------------------------------------------------ reporting
    def _report(
        self, event: str, batch_id: int, segment: int, batch: Joined, seconds: dict[str, float]
    ) -> dict[str, Any]:
        now = time.time()
        wall = max(now - self._last_batch_end, 1e-9)
        self._last_batch_end = now
        progress: dict[str, Any] = {
            "event": event,
            "batch_id": batch_id,
            "segment": segment,
            "records_in": batch.records,
            "stream_rows": batch.decoded.rows.num_rows,
            "dead_letters": batch.dead.num_rows,
            "output_rows": batch.out.num_rows,
            "steps": len(batch.steps),
            "arrival_rate": batch.records / wall,
            "seconds": seconds,
        }
        tail = self._progress(progress, batch)
        self.last_progress = progress
        log.info(
            "%s %d.%d: %d records, %d rows out, %s",
            event,
            batch_id,
            segment,
            batch.records,
            batch.out.num_rows,
            tail,
            extra=fields(**progress),
        )
        return progress
