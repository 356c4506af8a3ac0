"""What a Spark executor needs to run one shard, whatever hosts its state: no Spark imports here.

* :class:`ShardJob`: the picklable description of a sharded join (spec, router, where R
  and the checkpoints are), sent to the executors with each task;
* routing a stream batch (the shard of each row, and heartbeat rows so that every shard
  runs in every micro-batch: tuples waiting in H_S need steps even when no new tuple of
  their shard arrives);
* one shard's micro-batch (:func:`run_shard`): its rows in a deterministic order (the
  job's ``order_by`` column: a retried task must push the same tuples in the same order to
  produce the same output and checkpoint), then the steps the driver-side processor takes;
* the shard state as one value (:func:`pack` / :func:`unpack`), for hostings that keep it
  in Spark's state store.
"""

from __future__ import annotations

import dataclasses
import io
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.keys import key_family
from ssbj.core.master import ArrowMaster
from ssbj.core.operator import JoinSpec, SemiStreamJoin
from ssbj.core.sharded import process_shard, shard_store
from ssbj.core.shards import Router, ShardedArrowMaster, route_column
from ssbj.planning import JoinPlan, JoinSettings, plan_join

SHARD = "_ssbj_shard"  # the row's shard
LABEL = "_ssbj_label"  # the value Spark hash-partitions by: label s lands in Spark partition s
HEARTBEAT = "_ssbj_hb"  # a row that only makes its shard run in this micro-batch


@dataclass(frozen=True)
class ShardJob:
    """A sharded join as the executors see it (picklable; no Spark objects)."""

    name: str  # names the job's executor-resident state
    spec: JoinSpec  # each shard's spec: its budget is the total / P (plan_shard, or ssbj.core.sharded.shard_spec)
    router: Router
    stream_schema: pa.Schema
    master_path: str  # R as one Parquet file on storage every executor reads
    partition_rows: int  # b of each shard's share
    checkpoint_root: str  # shard s checkpoints under <root>/shard-<s> (shared storage)
    order_by: str  # a stream column that orders rows the same way in every attempt
    debug_dir: str | None = None  # tests and benchmarks: fault files, and one event log per Python worker

    @property
    def shards(self) -> int:
        """P."""
        return self.router.shards

    @property
    def family(self) -> str:
        """Key family of the stream key."""
        return key_family(self.stream_schema.field(self.spec.stream_key).type)

    def routed_schema(self) -> pa.Schema:
        """Stream columns plus shard, partition label and heartbeat flag."""
        return (
            self.stream_schema.append(pa.field(SHARD, pa.int32()))
            .append(pa.field(LABEL, pa.int32()))
            .append(pa.field(HEARTBEAT, pa.bool_()))
        )

    def output_schema(self) -> pa.Schema:
        """Return the enriched rows' schema (the operator's)."""
        op = self.fresh(0)
        return op.output_schema

    def master(self, shard: int) -> ShardedArrowMaster:
        """Return the shard's share of R (read from Parquet once per Python worker)."""
        key = (self.master_path, self.spec.master_key, shard, self.router, self.partition_rows)
        m = _MASTERS.get(key)
        if m is None:
            table = _read_master(self.master_path)
            whole = ArrowMaster(table, max(1, table.num_rows))
            m = ShardedArrowMaster(whole, self.spec.master_key, shard, self.router, self.partition_rows)
            _MASTERS[key] = m
        return m

    def fresh(self, shard: int) -> SemiStreamJoin:
        """Return a new operator for ``shard``."""
        m = self.master(shard)
        return SemiStreamJoin(self.spec, m, self.stream_schema, m.schema)

    def restore(self, shard: int, checkpoint_id: int | None, store: DirectoryStore | None = None) -> SemiStreamJoin:
        """``shard``'s operator from checkpoint ``checkpoint_id`` (None: a new one)."""
        if checkpoint_id is None and store is None:
            return self.fresh(shard)
        m = self.master(shard)
        return SemiStreamJoin.restore(
            store or self.store(shard),
            self.spec,
            m,
            self.stream_schema,
            m.schema,
            checkpoint_id,
        )

    def store(self, shard: int) -> DirectoryStore:
        """``shard``'s checkpoint directory."""
        return shard_store(self.checkpoint_root, shard)


def plan_shard(
    settings: JoinSettings, shards: int, stream_row_bytes: float, master_rows: int, master_row_bytes: float
) -> JoinPlan:
    """Plan one shard: a 1/P share of R within 1/P of the budget (b and w from the cost model)."""
    share = dataclasses.replace(settings, memory_budget=max(1, settings.memory_budget // shards))
    return plan_join(share, stream_row_bytes, max(1, master_rows // shards), master_row_bytes)


_MASTERS: dict[tuple[object, ...], ShardedArrowMaster] = {}
_TABLES: dict[str, pa.Table] = {}


def _read_master(path: str) -> pa.Table:
    t = _TABLES.get(path)
    if t is None:
        t = _TABLES[path] = pq.read_table(path)
    return t


# ---------------------------------------------------------------- routing (stage 1)
def route_batch(job: ShardJob, labels: tuple[int, ...], batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with each row's shard and partition label."""
    table = pa.Table.from_batches([batch]).select(job.stream_schema.names).cast(job.stream_schema)
    shard = route_column(table.column(job.spec.stream_key), job.family, job.router)
    label = np.asarray(labels, dtype=np.int32)[shard]
    cols = [*table.columns, pa.array(shard), pa.array(label), pa.array(np.zeros(len(shard), dtype=bool))]
    return pa.Table.from_arrays(cols, schema=job.routed_schema()).combine_chunks().to_batches()[0]


def heartbeats(job: ShardJob, labels: tuple[int, ...]) -> pa.RecordBatch:
    """One heartbeat row per shard: stream columns NULL."""
    p = job.shards
    cols = [pa.nulls(p, f.type) for f in job.stream_schema]
    cols += [pa.array(np.arange(p, dtype=np.int32)), pa.array(np.asarray(labels, np.int32)), pa.array([True] * p)]
    return pa.RecordBatch.from_arrays(cols, schema=job.routed_schema())


def shard_rows(job: ShardJob, table: pa.Table) -> pa.Table:
    """Return the real rows of a shard's input (no heartbeats), in ``order_by`` order, as the stream schema."""
    rows = table.filter(pc.invert(table.column(HEARTBEAT)))
    rows = rows.sort_by(job.order_by) if rows.num_rows else rows
    return rows.select(job.stream_schema.names).cast(job.stream_schema)


def run_shard(op: SemiStreamJoin, rows: pa.Table, drain: bool = False) -> pa.Table:
    """One micro-batch of one shard (or its final drain): the enriched rows."""
    if rows.num_rows:
        op.push(rows)
    results = list(op.drain()) if drain else process_shard(op)
    parts = [r.enriched for r in results if r.enriched.num_rows]
    return pa.concat_tables(parts) if parts else op.output_schema.empty_table()


# ---------------------------------------------------------------- the state as one value
def pack(op: SemiStreamJoin) -> bytes:
    """Return the operator's whole state as bytes: a full checkpoint's files in one Arrow IPC stream."""
    with tempfile.TemporaryDirectory(prefix="ssbj-pack-") as tmp:
        op.checkpoint(DirectoryStore(tmp, retain=1), 0)
        files = sorted(p for p in Path(tmp).iterdir() if p.is_file() and not p.name.startswith("."))
        table = pa.table(
            {"name": [p.name for p in files], "data": pa.array([p.read_bytes() for p in files], pa.binary())}
        )
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def unpack(job: ShardJob, shard: int, blob: bytes) -> SemiStreamJoin:
    """Inverse of :func:`pack`: the operator of ``shard`` in the packed state."""
    table = pa.ipc.open_stream(pa.BufferReader(blob)).read_all()
    with tempfile.TemporaryDirectory(prefix="ssbj-unpack-") as tmp:
        store = DirectoryStore(tmp, retain=1)
        for name, data in zip(table.column("name").to_pylist(), table.column("data").to_pylist(), strict=True):
            store.write(name, data)
        return job.restore(shard, 0, store)
