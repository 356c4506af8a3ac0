"""One micro-batch at a time: decode, join, write idempotently, checkpoint; no Spark here.

Exactly once comes from three rules:

1. the sink replaces everything written under (batch id, segment), so writing a batch
   again never duplicates rows;
2. the operator's state is checkpointed after the sink write, under the batch id, with
   the master-scan layout and the pipeline's counters in the same manifest;
3. a batch whose id is not newer than the last checkpoint is a replay: the state rolls
   back to the checkpoint before it, and the batch is processed again.

Steps run after batch N while the stream is idle (or at the end of an ``available-now``
run) form segments 1, 2, ... of batch N; they run only once Spark has committed N, so
a replay never meets them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from ssbj.api import collect
from ssbj.contracts import DEAD_LETTER_SCHEMA, CheckpointedMasterScan, RunCounts, WarehouseSink
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.costmodel import CostModel
from ssbj.core.operator import SemiStreamJoin, StepResult
from ssbj.errors import StateError
from ssbj.logs import fields
from ssbj.pipeline import faults
from ssbj.pipeline.observe import ObservedScan, StepObserver
from ssbj.pipeline.partwriter import PartWriter, parts_sink
from ssbj.pipeline.records import Decoded
from ssbj.pipeline.replay import rollback_before
from ssbj.planning import JoinSettings, estimate_row_bytes, join_spec, plan_join

log = logging.getLogger("ssbj.progress")

MasterFactory = Callable[[dict[str, Any] | None, int], CheckpointedMasterScan]
"""Build the master scan from a saved layout (or None: compute one) and b rows per partition."""
MasterInfo = Callable[[], tuple[int, pa.Schema]]
"""Rows in R now and the Arrow schema of the projected master columns (no layout needed)."""


@dataclass
class Totals:
    """Counters over the job's life; restored from the checkpoint."""

    records_in: int = 0
    decoded_rows: int = 0
    dead_letters: int = 0
    enriched_rows: int = 0
    batches: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class EnrichmentProcessor:
    """Drives the SSBJ operator one micro-batch at a time, with idempotent sinks."""

    def __init__(
        self,
        settings: JoinSettings,
        stream_schema: pa.Schema,
        master_factory: MasterFactory,
        master_info: MasterInfo,
        sink: WarehouseSink,
        dead_letters: WarehouseSink,
        store: DirectoryStore,
        cost_model: CostModel | None = None,
        observer: StepObserver | None = None,
    ) -> None:
        self.settings = settings
        self.stream_schema = stream_schema
        self._master_factory = master_factory
        self._master_info = master_info
        self.sink = sink
        self.dead_letter_sink = dead_letters
        self.store = store
        self.cost_model = cost_model or CostModel()
        self.observer = observer
        self.lock = threading.RLock()
        self.op: SemiStreamJoin | None = None
        self.master: CheckpointedMasterScan | None = None
        self.last_batch: int | None = None  # batch id of the newest checkpoint
        self.segment = 0
        self.token: str | None = None  # the newest checkpoint's generation: this state wrote or restored it
        self.totals = Totals()
        self.last_progress: dict[str, Any] = {}
        self._last_batch_end = time.time()
        self._prepared = False
        self._completed = 0  # stream tuples completed (matched or unmatched) at the last report

    # ------------------------------------------------------------------ state
    def open(self) -> None:
        """Restore the newest checkpoint, or start fresh (computing the master layout)."""
        with self.lock:
            latest = self.store.latest()
            if latest is None:
                self._fresh()
            else:
                self._restore(latest)
            self._prepare_sinks()

    def _prepare_sinks(self) -> None:
        if self._prepared or self.op is None:
            return

        self.sink.prepare(self.op.output_schema)
        self.dead_letter_sink.prepare(DEAD_LETTER_SCHEMA)
        self._prepared = True

    def _fresh(self) -> None:
        s = self.settings
        v_s = estimate_row_bytes(self.stream_schema)
        if s.needs_master_size:  # plan b and w from the budget: needs |R| (one COUNT)
            num_rows, schema = self._master_info()
            plan = plan_join(s, v_s, num_rows, estimate_row_bytes(schema), self.cost_model)
        else:
            plan = plan_join(s, v_s)
        master = self._scan(None, plan.partition_rows)
        self.master = master
        self.op = SemiStreamJoin(plan.spec, master, self.stream_schema, master.schema, self.cost_model)
        self.last_batch = None
        self.segment = 0
        self.token = None
        self.totals = Totals()
        self._completed = 0

    def _scan(self, layout: dict[str, Any] | None, partition_rows: int) -> CheckpointedMasterScan:
        scan = self._master_factory(layout, partition_rows)
        close = getattr(self.master, "close", None)  # the scan being replaced (its read-ahead thread)
        if callable(close):
            close()
        return scan if self.observer is None else ObservedScan(scan, self.observer)

    def _observed(self, result: StepResult) -> StepResult:
        if self.observer is not None:
            self.observer.on_step(result)
        return result

    def _restore(self, checkpoint_id: int) -> None:
        meta = SemiStreamJoin.checkpoint_meta(self.store, checkpoint_id)
        master = self._scan(meta["master_layout"], int(meta["partition_rows"]))
        self.master = master
        self.op = SemiStreamJoin.restore(
            self.store,
            join_spec(self.settings, int(meta["chunk_bytes"])),
            master,
            self.stream_schema,
            master.schema,
            checkpoint_id,
            self.cost_model,
        )
        t0 = self.op.totals()
        self._completed = t0.matched_source_rows + t0.unmatched_source_rows
        self.last_batch = int(meta["batch_id"])
        self.segment = int(meta["segment"])
        self.token = meta.get("token")
        t = dict(meta["totals"])
        self.totals = Totals(**t)

    def _rollback_before(self, batch_id: int) -> None:
        rollback_before(self.store, batch_id, self._restore, self._fresh, log)

    def _checkpoint(self, batch_id: int, segment: int) -> None:
        assert self.op is not None and self.master is not None  # noqa: S101
        token = uuid.uuid4().hex
        meta = {
            "batch_id": batch_id,
            "segment": segment,
            "token": token,
            "master_layout": self.master.layout(),
            "partition_rows": self.master.partition_rows,
            "chunk_bytes": self.op.chunk_bytes,
            "totals": asdict(self.totals),
            "counts": self.counts().to_dict(),  # what a driver sums over shards without restoring them
        }
        self.op.checkpoint(faults.store_for(self.store, batch_id), batch_id, meta)
        self.last_batch, self.segment, self.token = batch_id, segment, token

    def reset(self) -> None:
        """Forget the in-memory state: the next batch reloads the newest checkpoint (after a failed batch)."""
        with self.lock:
            self.op = None

    def position(self) -> tuple[int, int]:
        """(batch id, segment) of the newest checkpoint; (-1, 0) before the first batch."""
        return (self.last_batch if self.last_batch is not None else -1, self.segment)

    # ------------------------------------------------------------------ batches
    def process(self, batch_id: int, decode: Callable[[], Decoded]) -> dict[str, Any]:
        """Process micro-batch ``batch_id``, whose records ``decode`` returns."""
        with self.lock:
            t0 = time.perf_counter()
            if self.op is None:
                self.open()
            if self.last_batch is not None and batch_id <= self.last_batch:
                self._rollback_before(batch_id)
                self._prepare_sinks()
            op = self.op
            assert op is not None  # noqa: S101
            decoded = decode()
            faults.crash_point("after-decode", batch_id)
            records = decoded.rows.num_rows + decoded.dead.num_rows
            t1 = time.perf_counter()
            writer = self._writer(batch_id, 0)
            try:
                op.push(decoded.rows)
                results = []
                while op.buffered_tuples:
                    results.append(self._step(op.step(), writer))
                if not results and op.waiting_tuples:  # keep the R-cycle moving for tuples already waiting
                    results.append(self._step(op.step(), writer))
                t2 = time.perf_counter()
                out = self._output(results)
                self._finish(writer, batch_id, 0, out)
            except BaseException:
                if writer is not None:
                    writer.abort()
                raise
            self.dead_letter_sink.write(batch_id, 0, decoded.dead)
            faults.crash_point("after-sink", batch_id)
            t3 = time.perf_counter()
            self.totals.records_in += records
            self.totals.decoded_rows += decoded.rows.num_rows
            self.totals.dead_letters += decoded.dead.num_rows
            self.totals.enriched_rows += out.num_rows
            self.totals.batches += 1
            self._checkpoint(batch_id, 0)
            faults.crash_point("after-checkpoint", batch_id)
            t4 = time.perf_counter()
            return self._report(
                "batch",
                batch_id,
                0,
                records,
                decoded,
                results,
                out,
                {"decode": t1 - t0, "join": t2 - t1, "write": t3 - t2, "checkpoint": t4 - t3},
            )

    def drain(self, is_committed: Callable[[int], bool]) -> dict[str, Any] | None:
        """Finish every waiting tuple's R-cycle as a new segment of the last committed batch."""
        with self.lock:
            if self.op is None:
                self.open()
            op = self.op
            assert op is not None  # noqa: S101
            if self.last_batch is None or op.waiting_tuples == 0 or not is_committed(self.last_batch):
                return None
            t0 = time.perf_counter()
            segment = self.segment + 1
            writer = self._writer(self.last_batch, segment)
            try:
                results = [self._step(r, writer) for r in op.drain()]
                t1 = time.perf_counter()
                out = self._output(results)
                self._finish(writer, self.last_batch, segment, out)
            except BaseException:
                if writer is not None:
                    writer.abort()
                raise
            t2 = time.perf_counter()
            self.totals.enriched_rows += out.num_rows
            self._checkpoint(self.last_batch, segment)
            t3 = time.perf_counter()
            empty = Decoded(self.stream_schema.empty_table(), pa.table({}))
            return self._report(
                "drain",
                self.last_batch,
                segment,
                0,
                empty,
                results,
                out,
                {"join": t1 - t0, "write": t2 - t1, "checkpoint": t3 - t2},
            )

    def _writer(self, batch_id: int, segment: int) -> PartWriter | None:
        """Return a writer that loads the output while the steps run (None: the sink writes it at the end)."""
        sink = parts_sink(self.sink)
        return PartWriter(sink, batch_id, segment) if sink is not None else None

    def _step(self, result: StepResult, writer: PartWriter | None) -> StepResult:
        result = self._observed(result)
        if writer is not None:
            assert self.op is not None  # noqa: S101
            writer.put(collect([result], self.op.output_schema, self.settings.join_type))
        return result

    def _finish(self, writer: PartWriter | None, batch_id: int, segment: int, out: pa.Table) -> None:
        if writer is None:
            self.sink.write(batch_id, segment, out)
            return
        writer.finish()
        if writer.rows != out.num_rows:  # the parts are the output, step by step
            raise StateError(f"batch {batch_id}.{segment}: {writer.rows} rows written for {out.num_rows} output rows")

    def _output(self, results: list[StepResult]) -> pa.Table:
        assert self.op is not None  # noqa: S101
        return collect(results, self.op.output_schema, self.settings.join_type)

    # ------------------------------------------------------------------ reporting
    def _report(
        self,
        event: str,
        batch_id: int,
        segment: int,
        records: int,
        decoded: Decoded,
        results: list[StepResult],
        out: pa.Table,
        seconds: dict[str, float],
    ) -> dict[str, Any]:
        op = self.op
        assert op is not None  # noqa: S101
        now = time.time()
        wall = max(now - self._last_batch_end, 1e-9)
        self._last_batch_end = now
        t = op.totals()
        busy = sum(r.metrics.c_loop_measured for r in results)
        served = sum(r.metrics.w for r in results)
        completed = t.matched_source_rows + t.unmatched_source_rows
        done_now, self._completed = completed - self._completed, completed
        last = results[-1].metrics if results else None
        progress: dict[str, Any] = {
            "event": event,
            "batch_id": batch_id,
            "segment": segment,
            "records_in": records,
            "stream_rows": decoded.rows.num_rows,
            "dead_letters": decoded.dead.num_rows,
            "output_rows": out.num_rows,
            "steps": len(results),
            "arrival_rate": records / wall,
            "completed_tuples": done_now,
            "service_rate": done_now / busy if busy > 0 else 0.0,
            "cache_hit_share": (sum(r.metrics.w_n for r in results) / served) if served else 0.0,
            "r_cycle": op.r_cycle,
            "partition": last.partition if last else None,
            "partitions": last.partitions if last else None,
            "waiting_tuples": op.waiting_tuples,
            "memory": op.memory().to_dict(),
            "seconds": seconds,
            # reading R (in the prefetch thread when read ahead) and what the steps waited for it
            "master_read": {
                "read_seconds": sum(r.metrics.io_seconds for r in results),
                "wait_seconds": sum(r.metrics.read_wait_seconds for r in results),
            },
            "totals": {
                "records_in": self.totals.records_in,
                "dead_letters": self.totals.dead_letters,
                "stream_rows": t.tuples_in,
                "matched_source_rows": t.matched_source_rows,
                "unmatched_source_rows": t.unmatched_source_rows,
                "waiting": t.waiting,
                "output_rows": self.totals.enriched_rows,
                "cache_share": t.cache_share,
            },
        }
        self.last_progress = progress
        log.info(
            "%s %d.%d: %d records, %d rows out, %d waiting",
            event,
            batch_id,
            segment,
            records,
            out.num_rows,
            op.waiting_tuples,
            extra=fields(**progress),
        )
        return progress

    def counts(self) -> RunCounts:
        """Return the job's counts so far (they reconcile: :attr:`RunCounts.reconciled`)."""
        assert self.op is not None  # noqa: S101
        t = self.op.totals()
        return RunCounts(
            records_in=self.totals.records_in,
            matched_source_rows=t.matched_source_rows,
            unmatched_source_rows=t.unmatched_source_rows,
            waiting=t.waiting,
            dead_letters=self.totals.dead_letters,
            output_rows=self.totals.enriched_rows,
        )
