"""A multi-way job, one micro-batch at a time: decode, join, write idempotently, checkpoint.

The exactly-once rules and the order of the work are :mod:`ssbj.pipeline.lifecycle`'s;
the state checkpointed is :class:`MultiWayJoin`'s (waiting chunks, caches, statistics,
probe orders, the source-row ledger) with the master plan (held or scanned, the scans'
layouts) in the same manifest.

Counts (what the audit row and ``ssbj run``'s summary reconcile), per source record:
``records in = output source rows + dropped + waiting + dead letters``, where an *output*
source row produced at least one result row, a *dropped* one finished with none (the
stream's WHERE filtered it, or an inner edge found no master row for it or for every row
derived from it), and a *waiting* one still has derived rows waiting for a scanned
master's R-cycle (:mod:`ssbj.core.multiway.lineage`). With only left edges and no stream
filter nothing is dropped. They map onto :class:`RunCounts` as matched = output, unmatched
= dropped.

Two streams joined in a window (``second_stream``): a micro-batch holds records of both
(``decode`` returns decoded rows per stream alias); the first stream's rows are fed, then
the second's. A row kept in the window is *waiting*; a late row is a dead letter (reason,
its record's position). The counts reconcile per stream (:meth:`stream_counts`) and in
total. A drain finishes the scans but keeps the window's rows (more may come).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from ssbj.adapters.lsmstore import LsmStore
from ssbj.config import MultiWayJobConfig
from ssbj.contracts import DEAD_LETTER_SCHEMA, MasterScan, RunCounts, WarehouseSink
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.multiway import MemoryStore, MultiWayJoin, WaitingStore
from ssbj.core.multiway.lineage import SOURCE_COLUMN
from ssbj.errors import StateError
from ssbj.pipeline.factory import build_sink
from ssbj.pipeline.lifecycle import Emit, Joined, JoinProcessor
from ssbj.pipeline.multiway_masters import JobQuery, MasterPlan
from ssbj.pipeline.records import Decoded

log = logging.getLogger("ssbj.progress")


@dataclass
class MultiWayTotals:
    """Counters over the job's life; restored from the checkpoint."""

    records_in: int = 0
    decoded_rows: int = 0
    dead_letters: int = 0
    output_rows: int = 0
    batches: int = 0
    # per stream alias (a window join of two streams): records and decoding's dead letters
    streams: dict[str, dict[str, int]] = field(default_factory=dict)

    def add_stream(self, alias: str, records: int, dead: int) -> None:
        """Count one batch of a stream."""
        s = self.streams.setdefault(alias, {"records_in": 0, "decode_dead_letters": 0})
        s["records_in"] += records
        s["decode_dead_letters"] += dead


class MultiWayProcessor(JoinProcessor[Decoded | dict[str, Decoded]]):
    """Drives :class:`MultiWayJoin` one micro-batch at a time, with idempotent sinks."""

    totals: MultiWayTotals

    def __init__(
        self,
        query: JobQuery,
        sink: WarehouseSink,
        dead_letters: WarehouseSink,
        store: DirectoryStore,
    ) -> None:
        super().__init__(sink, dead_letters, store)
        self.query = query
        self.cfg = query.cfg
        self.op: MultiWayJoin | None = None
        self.plan: MasterPlan | None = None
        self._masters: tuple[str, dict[str, pa.Table | MasterScan]] | None = None
        self.totals = MultiWayTotals()
        self._feeding: tuple[str, int, Decoded] | None = None  # (alias, first source id, rows) of the batch running
        self._late: list[pa.Table] = []  # dead letters of late rows found in the batch running

    # ------------------------------------------------------------------ state
    def _options(self) -> dict[str, Any]:
        j = self.cfg.join
        store: WaitingStore = LsmStore() if j.store == "lsm" else MemoryStore()
        return {
            "order_policy": j.order_policy,
            "store": store,
            "hold_share": j.hold_share,
            "use_cache": j.cache,
            "track_sources": True,
            "late_sink": self._on_late,
        }

    def _open_masters(self, plan: MasterPlan) -> dict[str, pa.Table | MasterScan]:
        """Return the masters of ``plan``; reused while the plan is the same (a replay in this process)."""
        key = repr(sorted(plan.to_dict().items()))
        if self._masters is None or self._masters[0] != key:
            self._masters = (key, self.query.open(plan))
        return self._masters[1]

    def _hold(self, plan: MasterPlan) -> dict[str, bool]:
        return {m.alias: plan.held[m.table] for m in self.query.spec.masters}

    def _live(self) -> bool:
        return self.op is not None

    def _output_schema(self) -> pa.Schema:
        return self.query.output_schema

    def _close_op(self) -> None:
        if self.op is not None:
            self.op.store.close()
            self.op = None

    def _fresh(self) -> None:
        self._close_op()
        budget = self.cfg.join.memory
        self.plan = self.query.plan(budget)
        masters = self._open_masters(self.plan)
        self.op = MultiWayJoin(self.query.spec, masters, budget, hold=self._hold(self.plan), **self._options())
        self.last_batch, self.segment = None, 0
        self.totals = MultiWayTotals()

    def _restore(self, checkpoint_id: int) -> None:
        self._close_op()
        meta = MultiWayJoin.checkpoint_meta(self.store, checkpoint_id)
        self.plan = MasterPlan.from_dict(meta["masters"])
        masters = self._open_masters(self.plan)
        self.op = MultiWayJoin.restore(
            self.store,
            self.query.spec,
            masters,
            self.cfg.join.memory,
            checkpoint_id,
            hold=self._hold(self.plan),
            **self._options(),
        )
        self.last_batch = int(meta["batch_id"])
        self.segment = int(meta["segment"])
        self.totals = MultiWayTotals(**meta["totals"])

    def _manifest(self) -> dict[str, Any]:
        assert self.plan is not None  # noqa: S101
        return {"masters": self.plan.to_dict(), "totals": asdict(self.totals)}

    def _save(self, store: DirectoryStore, batch_id: int, meta: dict[str, Any]) -> None:
        assert self.op is not None  # noqa: S101
        self.op.checkpoint(store, batch_id, meta)

    def _forget(self) -> None:
        self._close_op()
        self._masters = None  # an outage may have cut the held masters' read short: read them again

    # ------------------------------------------------------------------ batches
    def _steps(self, rows: pa.Table) -> list[pa.Table]:
        step = self.cfg.join.step_rows
        if rows.num_rows == 0:
            return [rows]
        if step is None:
            return [rows]
        return [rows.slice(i, step) for i in range(0, rows.num_rows, step)]

    def _on_late(self, alias: str, rows: pa.Table) -> None:
        """Late rows of a window stream become dead letters with the reason and their record's position."""
        op, feeding = self.op, self._feeding
        assert op is not None and op.window is not None and feeding is not None  # noqa: S101
        fed_alias, first_id, decoded = feeding
        if fed_alias != alias or decoded.sources is None:
            raise StateError(f"late rows of stream {alias!r} outside the step feeding it")
        side = op.window.side_of(alias)
        idx = pa.array(np.asarray(rows.column(f"{alias}.{SOURCE_COLUMN}").to_numpy(), np.int64) - first_id)
        w = op.spec.window
        assert w is not None  # noqa: S101
        tcol = w.probe_time if side == 0 else w.time
        wm = op.window.watermark(side)
        shown: Any = wm
        if op.window.is_time and wm is not None:
            shown = datetime(1970, 1, 1) + timedelta(microseconds=wm)
        where = decoded.sources.take(idx)
        records = decoded.rows.take(idx)
        name = self.query.stream_tables.get(alias, alias)
        reasons, payloads = [], []
        for r in records.to_pylist():
            reasons.append(
                f"late: stream {name} event time {tcol}={r[tcol]} is below the stream's watermark {shown} "
                f"(largest event time so far minus the allowed lateness {w.lateness})"
            )
            payloads.append(json.dumps(r, default=str).encode())
        cols = {n: where.column(n) for n in where.column_names}
        cols["reason"] = pa.array(reasons, pa.string())
        cols["payload"] = pa.array(payloads, pa.binary())
        self._late.append(pa.table({n: cols[n] for n in DEAD_LETTER_SCHEMA.names}, schema=DEAD_LETTER_SCHEMA))

    def _feed(self, batches: dict[str, Decoded]) -> list[pa.Table]:
        """Run the batch's rows through the operator: each stream's rows in steps, the first stream first."""
        op = self.op
        assert op is not None  # noqa: S101
        parts: list[pa.Table] = []
        if op.window is None:
            rows = next(iter(batches.values())).rows
            if rows.num_rows or op.waiting_rows:
                parts = [op.process(s) for s in self._steps(rows)]
            return parts
        for side, alias in enumerate(op.spec.streams):
            d = batches[alias]
            self._feeding = (alias, op.counters[f"rows_in.{side}"], d)  # ids of this batch's rows start here
            for s in self._steps(d.rows):
                if s.num_rows:
                    parts.append(op.process(s, alias))
        self._feeding = None
        if not parts and op.waiting_rows:
            parts.append(op.process(pa.table({})))  # scanned masters go on with their R-cycles
        return parts

    def _output(self, parts: list[pa.Table]) -> pa.Table:
        schema = self.query.output_schema
        tables = [t.cast(schema) for t in parts if t.num_rows]
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def _join(self, got: Decoded | dict[str, Decoded], emit: Emit) -> Joined:
        op = self.op
        assert op is not None  # noqa: S101
        batches = got if isinstance(got, dict) else {op.spec.stream: got}
        records = sum(d.rows.num_rows + d.dead.num_rows for d in batches.values())
        self._late = []
        parts = self._feed(batches)
        out = self._output(parts)
        dead = pa.concat_tables([*(d.dead for d in batches.values()), *self._late])
        if op.window is not None:
            for alias, d in batches.items():
                self.totals.add_stream(alias, d.rows.num_rows + d.dead.num_rows, d.dead.num_rows)
        rows = (
            pa.concat_tables([d.rows for d in batches.values()], promote_options="permissive")
            if len(batches) > 1
            else next(iter(batches.values())).rows
        )
        return Joined(records, Decoded(rows, dead), out, parts)

    def _waiting(self) -> int:
        assert self.op is not None  # noqa: S101
        return self.op.waiting_rows

    def _drain_steps(self, emit: Emit) -> Joined:
        assert self.op is not None  # noqa: S101
        # rows kept for a window join stay kept: the streams go on (next run); only the scans finish
        parts = list(self.op.drain(release_window=False))
        empty = Decoded(self.cfg.stream_schema.empty_table(), DEAD_LETTER_SCHEMA.empty_table())
        return Joined(0, empty, self._output(parts), parts)

    def _add_output(self, rows: int) -> None:
        self.totals.output_rows += rows

    # ------------------------------------------------------------------ reporting
    def _progress(self, progress: dict[str, Any], batch: Joined) -> str:
        op = self.op
        assert op is not None  # noqa: S101
        c = self.counts()
        st = op.counters
        busy = progress["seconds"].get("join", 0.0)
        probed = max(st["rows_probed"], 1)
        progress.update(
            {
                "service_rate": batch.decoded.rows.num_rows / busy if busy > 0 else 0.0,
                "cache_hit_share": st["served_by_cache"] / probed,
                "r_cycle": "-",
                "partition": None,
                "partitions": None,
                "waiting_tuples": c.waiting,
                "waiting_rows": op.waiting_rows,
                "probe_order": [op.edges[e].edge.master for e in op.order],
                "memory": op.memory(),
                "totals": {
                    "records_in": c.records_in,
                    "dead_letters": c.dead_letters,
                    "stream_rows": st["tuples_in"],
                    "output_source_rows": c.matched_source_rows,
                    "dropped_source_rows": c.unmatched_source_rows,
                    "waiting": c.waiting,
                    "output_rows": c.output_rows,
                },
            }
        )
        if op.window is not None:
            progress["streams"] = self.stream_counts()
            progress["watermarks"] = {a: op.window.watermark(i) for i, a in enumerate(op.window.aliases)}
            progress["late_rows"] = op.window.counters["window_late"]
        return f"{c.waiting} source rows waiting"

    def stream_counts(self) -> dict[str, dict[str, Any]]:
        """Per stream of a window join: records in = output + dropped + waiting + dead letters (decoding and late)."""
        op = self.op
        assert op is not None  # noqa: S101
        if op.window is None:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for alias, c in op.stream_counts().items():
            t = self.totals.streams.get(alias, {"records_in": 0, "decode_dead_letters": 0})
            dead = t["decode_dead_letters"] + c["late"]
            row = {
                "stream": self.query.stream_tables.get(alias, alias),
                "records_in": t["records_in"],
                "output_source_rows": c["output"],
                "dropped_source_rows": c["dropped"],
                "waiting": c["waiting"],
                "dead_letters": dead,
                "late": c["late"],
            }
            row["reconciled"] = row["records_in"] == c["output"] + c["dropped"] + c["waiting"] + dead
            out[alias] = row
        return out

    def counts(self) -> RunCounts:
        """Return the job's counts so far (they reconcile: :attr:`RunCounts.reconciled`)."""
        assert self.op is not None  # noqa: S101
        st = self.op.counters
        return RunCounts(
            records_in=self.totals.records_in,
            matched_source_rows=st["source_rows_out"],
            unmatched_source_rows=st["source_rows_dropped"],
            waiting=self.op.waiting_source_rows,
            dead_letters=self.totals.dead_letters,
            output_rows=self.totals.output_rows,
        )


def build_multiway_processor(cfg: MultiWayJobConfig, store: DirectoryStore) -> MultiWayProcessor:
    """Return the processor with its compiled query, masters and sinks (connections are opened here)."""
    return MultiWayProcessor(JobQuery(cfg), build_sink(cfg.sink), build_sink(cfg.dead_letter), store)
