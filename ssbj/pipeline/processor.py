"""The single-table job one micro-batch at a time: decode, join, write idempotently, checkpoint; no Spark here.

The exactly-once rules and the order of the work are :mod:`ssbj.pipeline.lifecycle`'s;
this module supplies the SSBJ operator, its master scan (whose layout is saved in every
checkpoint) and its progress fields.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from ssbj.api import collect
from ssbj.contracts import DEAD_LETTER_SCHEMA, CheckpointedMasterScan, RunCounts, WarehouseSink
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.costmodel import CostModel
from ssbj.core.operator import SemiStreamJoin, StepResult
from ssbj.pipeline.lifecycle import Emit, Joined, JoinProcessor
from ssbj.pipeline.observe import ObservedScan, StepObserver
from ssbj.pipeline.records import Decoded
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


class EnrichmentProcessor(JoinProcessor[Decoded]):
    """Drives the SSBJ operator one micro-batch at a time, with idempotent sinks."""

    emits_steps = True
    totals: Totals

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
        super().__init__(sink, dead_letters, store)
        self.settings = settings
        self.stream_schema = stream_schema
        self._master_factory = master_factory
        self._master_info = master_info
        # None: the operator measures its hybrid paths (ssbj.core.pathcost); the planner uses the defaults
        self.cost_model = cost_model
        self.observer = observer
        self.op: SemiStreamJoin | None = None
        self.master: CheckpointedMasterScan | None = None
        self.totals = Totals()
        self._completed = 0  # stream tuples completed (matched or unmatched) at the last report

    # ------------------------------------------------------------------ state
    def _live(self) -> bool:
        return self.op is not None

    def _forget(self) -> None:
        self.op = None

    def _output_schema(self) -> pa.Schema:
        assert self.op is not None  # noqa: S101
        return self.op.output_schema

    def _fresh(self) -> None:
        s = self.settings
        v_s = estimate_row_bytes(self.stream_schema)
        if s.needs_master_size:  # plan b and w from the budget: needs |R| (one COUNT)
            num_rows, schema = self._master_info()
            plan = plan_join(s, v_s, num_rows, estimate_row_bytes(schema), self.cost_model or CostModel())
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

    def _manifest(self) -> dict[str, Any]:
        assert self.op is not None and self.master is not None  # noqa: S101
        return {
            "master_layout": self.master.layout(),
            "partition_rows": self.master.partition_rows,
            "chunk_bytes": self.op.chunk_bytes,
            "totals": asdict(self.totals),
        }

    def _save(self, store: DirectoryStore, batch_id: int, meta: dict[str, Any]) -> None:
        assert self.op is not None  # noqa: S101
        self.op.checkpoint(store, batch_id, meta)

    # ------------------------------------------------------------------ batches
    def _join(self, got: Decoded, emit: Emit) -> Joined:
        op = self.op
        assert op is not None  # noqa: S101
        op.push(got.rows)
        results = []
        while op.buffered_tuples:
            results.append(self._step(op.step(), emit))
        if not results and op.waiting_tuples:
            results.append(self._step(op.step(), emit))  # keep the R-cycle moving for tuples already waiting
        return Joined(got.rows.num_rows + got.dead.num_rows, got, self._output(results), results)

    def _step(self, result: StepResult, emit: Emit) -> StepResult:
        result = self._observed(result)
        if emit is not None:
            emit(self._output([result]))
        return result

    def _waiting(self) -> int:
        assert self.op is not None  # noqa: S101
        return self.op.waiting_tuples

    def _drain_steps(self, emit: Emit) -> Joined:
        assert self.op is not None  # noqa: S101
        results = [self._step(r, emit) for r in self.op.drain()]
        empty = Decoded(self.stream_schema.empty_table(), DEAD_LETTER_SCHEMA.empty_table())
        return Joined(0, empty, self._output(results), results)

    def _add_output(self, rows: int) -> None:
        self.totals.enriched_rows += rows

    def _output(self, results: list[StepResult]) -> pa.Table:
        assert self.op is not None  # noqa: S101
        return collect(results, self.op.output_schema, self.settings.join_type)

    # ------------------------------------------------------------------ reporting
    def _progress(self, progress: dict[str, Any], batch: Joined) -> str:
        op = self.op
        assert op is not None  # noqa: S101
        results: list[StepResult] = batch.steps
        t = op.totals()
        busy = sum(r.metrics.c_loop_measured for r in results)
        served = sum(r.metrics.w for r in results)
        completed = t.matched_source_rows + t.unmatched_source_rows
        done_now, self._completed = completed - self._completed, completed
        last = results[-1].metrics if results else None
        progress.update(
            {
                "completed_tuples": done_now,
                "service_rate": done_now / busy if busy > 0 else 0.0,
                "cache_hit_share": (sum(r.metrics.w_n for r in results) / served) if served else 0.0,
                "r_cycle": op.r_cycle,
                "partition": last.partition if last else None,
                "partitions": last.partitions if last else None,
                "waiting_tuples": op.waiting_tuples,
                "memory": op.memory().to_dict(),
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
        )
        return f"{op.waiting_tuples} waiting"

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
