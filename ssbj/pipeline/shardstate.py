"""Hosting B: Spark's state store holds each shard's state as one value (``applyInPandasWithState``).

The streaming query routes rows (the same stage 1 as hosting A, heartbeats included),
groups them by the shard's partition label (``spark.sql.shuffle.partitions`` = P, so the P
groups are P state-store partitions and run in parallel), and for each group restores the
operator from the packed state (:func:`ssbj.pipeline.shardexec.unpack`), runs the
micro-batch, and stores the packed state again. Spark versions the state store with the
micro-batch: a retried task or a replayed batch starts from the state committed before it,
whatever attempt ran earlier.

Draining: a shard whose group received nothing for ``idle_ms`` (no micro-batch: the input
ended) times out; its timed-out call drains the operator, emits the rows and one marker
row (``_ssbj_final``), and removes the state. The idle drain of the driver-side pipeline
(``trigger.idle_drain_seconds``) becomes Spark's processing-time timeout.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from ssbj.pipeline.shardexec import LABEL, ShardJob, pack, run_shard, shard_rows, unpack
from ssbj.pipeline.shardhost import inject_fault, log_event, route_partition

FINAL = "_ssbj_final"  # a marker row: the shard drained and removed its state
STATE_SCHEMA = "blob binary, batches long"


def output_schema(job: ShardJob) -> pa.Schema:
    """Enriched rows plus the shard and the drain marker."""
    return job.output_schema().append(pa.field("_ssbj_shard_id", pa.int32())).append(pa.field(FINAL, pa.bool_()))


def _frame(job: ShardJob, out: pa.Table, shard: int, final: bool) -> pd.DataFrame:
    n = out.num_rows
    cols = [*out.columns, pa.array([shard] * n, pa.int32()), pa.array([False] * n)]
    table = pa.Table.from_arrays(cols, schema=output_schema(job))
    if final:  # the marker: every enriched column NULL
        marker = [pa.nulls(1, f.type) for f in job.output_schema()] + [pa.array([shard], pa.int32()), pa.array([True])]
        table = pa.concat_tables([table, pa.Table.from_arrays(marker, schema=output_schema(job))])
    return table.to_pandas()


def apply_shard(
    job: ShardJob,
    labels: tuple[int, ...],
    idle_ms: int,
    key: tuple[Any, ...],
    frames: Iterator[pd.DataFrame],
    state: GroupState,
) -> Iterator[pd.DataFrame]:
    """One shard's micro-batch with its state as one value (or its drain, on timeout)."""
    shard = labels.index(int(key[0]))
    if state.hasTimedOut:
        if state.exists:
            op = unpack(job, shard, state.get[0])
            out = run_shard(op, job.stream_schema.empty_table(), drain=True)
            state.remove()
            yield _frame(job, out, shard, final=True)
        return
    routed = job.routed_schema()
    parts = [pa.Table.from_pandas(f, schema=routed, preserve_index=False) for f in frames]
    rows = shard_rows(job, pa.concat_tables(parts) if parts else routed.empty_table())
    t0 = time.perf_counter()
    op = unpack(job, shard, state.get[0]) if state.exists else job.fresh(shard)
    batches = int(state.get[1]) + 1 if state.exists else 1
    t1 = time.perf_counter()
    steps = op.totals().steps
    out = run_shard(op, rows)
    t2 = time.perf_counter()
    blob = pack(op)
    state.update((blob, batches))
    seconds = {"restore": t1 - t0, "join": t2 - t1, "checkpoint": time.perf_counter() - t2}
    state.setTimeoutDuration(idle_ms)
    ctx = TaskContext.get()
    batch_id = int(ctx.getLocalProperty("streaming.sql.batchId") or -1) if ctx is not None else -1
    attempt = ctx.attemptNumber() if ctx is not None else -1
    source = "state" if batches > 1 else "fresh"
    event = {"shard": shard, "batch_id": batch_id, "source": source, "attempt": attempt, "pid": os.getpid()}
    sizes = {"rows": rows.num_rows, "out": out.num_rows, "state_bytes": len(blob), "steps": op.totals().steps - steps}
    sizes["state_batches"] = batches  # micro-batches folded into the state, this one included
    log_event(job, {**event, **sizes, "seconds": seconds})
    inject_fault(job, shard, batch_id)
    yield _frame(job, out, shard, final=False)


def stateful_frame(stream: DataFrame, job: ShardJob, labels: tuple[int, ...], idle_ms: int) -> DataFrame:
    """Return the enriched stream with drain markers (``spark.sql.shuffle.partitions`` must be P)."""
    routed = stream.select(*job.stream_schema.names).mapInArrow(
        partial(route_partition, job, labels), from_arrow_schema(job.routed_schema())
    )
    return routed.groupBy(F.col(LABEL)).applyInPandasWithState(
        partial(apply_shard, job, labels, idle_ms),
        from_arrow_schema(output_schema(job)),
        STATE_SCHEMA,
        "append",
        GroupStateTimeout.ProcessingTimeTimeout,
    )


def parquet_sink(out_dir: str, on_batch: Callable[[int, int], None]) -> Callable[[DataFrame, int], None]:
    """foreachBatch: replace ``<out_dir>/batch=<id>`` with the rows, report (id, shards drained)."""

    def write(df: DataFrame, batch_id: int) -> None:
        df.persist()  # one evaluation of the stateful operator per batch
        try:
            rows = df.filter(~F.col(FINAL)).drop(FINAL, "_ssbj_shard_id")
            rows.write.mode("overwrite").parquet(f"{out_dir}/batch={batch_id}")
            finals = df.filter(F.col(FINAL)).count()
            on_batch(batch_id, finals)
        finally:
            df.unpersist()

    return write
