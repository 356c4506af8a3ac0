"""Hosting A: ``foreachBatch`` + repartition by shard + ``mapInArrow``, operator state resident in the Python worker.

Per micro-batch (batch id N), in the executors:

1. stage 1 (``mapInArrow``, one task per source partition) routes each row to its shard
   (:func:`ssbj.pipeline.shardexec.route_batch`) and adds one heartbeat row per shard;
2. ``repartition(P, label)``: label s hashes to Spark partition s (:func:`partition_labels`),
   so each shard's rows (and its heartbeat) meet in one task, and the P shards run in
   parallel;
3. stage 2 (``mapInArrow``) runs each shard present in the task: the operator is taken from
   a module-level dict of the Python worker keyed by (job, shard) when it holds the shard's
   newest checkpoint, and otherwise restored from ``<root>/shard-<s>`` (the shard moved,
   the worker restarted, or the idle worker was reaped); after the steps the shard is
   checkpointed under N (the same rules as ``ssbj/pipeline/processor.py``: a batch id not
   newer than the shard's newest checkpoint is a replay, restored from the checkpoint
   before it).

The driver writes the joined rows of batch N to ``<out>/batch=N`` (overwrite), so a
replayed batch replaces what an earlier attempt wrote. docs/sharding.md discusses what
task retries, replays and concurrent attempts do to this.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from ssbj.core.operator import SemiStreamJoin
from ssbj.pipeline.shardedrun import partition_labels
from ssbj.pipeline.shardexec import LABEL, SHARD, ShardJob, heartbeats, route_batch, run_shard, shard_rows

# (job name, shard) -> (checkpoint id the operator is at, operator); lives as long as the Python worker
_RESIDENT: dict[tuple[str, int], tuple[int, SemiStreamJoin]] = {}


def route_partition(
    job: ShardJob, labels: tuple[int, ...], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Stage 1: route every row, then one heartbeat per shard (every shard runs every batch)."""
    for b in batches:
        if b.num_rows:
            yield route_batch(job, labels, b)
    yield heartbeats(job, labels)


def operator_for(job: ShardJob, shard: int, batch_id: int) -> tuple[SemiStreamJoin, str]:
    """Return the shard's operator as it was before ``batch_id``, and where it came from."""
    store = job.store(shard)
    ids = store.manifests()
    latest = ids[-1] if ids else None
    if latest is not None and batch_id <= latest:  # a replay: the state before this batch
        older = [i for i in ids if i < batch_id]
        return job.restore(shard, older[-1] if older else None), "replay"
    held = _RESIDENT.get((job.name, shard))
    if held is not None and held[0] == latest:
        return held[1], "resident"
    return job.restore(shard, latest), "checkpoint" if latest is not None else "fresh"


def join_shard(job: ShardJob, shard: int, batch_id: int, rows: pa.Table, drain: bool) -> pa.Table:
    """One shard's micro-batch in this worker; the checkpoint under ``batch_id`` ends it."""
    _RESIDENT.pop((job.name, shard), None)  # an attempt that fails below leaves nothing resident
    t0 = time.perf_counter()
    op, source = operator_for(job, shard, batch_id)
    t1 = time.perf_counter()
    steps = op.totals().steps
    out = run_shard(op, rows, drain)
    t2 = time.perf_counter()
    ctx = TaskContext.get()
    meta = {"batch_id": batch_id, "source": source, "pid": os.getpid(), "rows": rows.num_rows, "out": out.num_rows}
    meta["attempt"] = ctx.attemptNumber() if ctx is not None else -1
    op.checkpoint(job.store(shard), batch_id, meta)
    _RESIDENT[(job.name, shard)] = (batch_id, op)
    seconds = {"restore": t1 - t0, "join": t2 - t1, "checkpoint": time.perf_counter() - t2}
    log_event(job, {"shard": shard, **meta, "steps": op.totals().steps - steps, "seconds": seconds})
    inject_fault(job, shard, batch_id)
    return out


def log_event(job: ShardJob, event: dict[str, Any]) -> None:
    """Append ``event`` (tests and benchmarks) to ``<debug_dir>/events-<pid>.jsonl``."""
    if job.debug_dir is not None:
        with open(Path(job.debug_dir) / f"events-{os.getpid()}.jsonl", "a") as fh:
            fh.write(json.dumps(event) + "\n")


def read_events(debug_dir: str) -> list[dict[str, Any]]:
    """Every event logged under ``debug_dir``."""
    return [
        json.loads(line) for p in sorted(Path(debug_dir).glob("events-*.jsonl")) for line in p.read_text().splitlines()
    ]


def inject_fault(job: ShardJob, shard: int, batch_id: int) -> None:
    """Fail the first attempt after its checkpoint (tests only) when ``<debug_dir>/<batch>-<shard>-<kind>`` exists."""
    if job.debug_dir is None:
        return
    ctx = TaskContext.get()
    if ctx is None or ctx.attemptNumber() > 0:
        return
    base = Path(job.debug_dir) / f"{batch_id}-{shard}"
    if Path(f"{base}-raise").exists():
        raise RuntimeError(f"injected failure after the checkpoint of batch {batch_id}, shard {shard}")
    if Path(f"{base}-exit").exists():
        os._exit(17)  # the Python worker dies: its resident state is gone


def join_partition(
    job: ShardJob, batch_id: int, drain: bool, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Stage 2: every shard in this task (one, unless partitions were merged), in shard order."""
    parts = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    if not parts:
        return
    table = pa.concat_tables(parts)
    shard_col = table.column(SHARD)
    for s in np.unique(shard_col.to_numpy()):
        rows = shard_rows(job, table.filter(pc.equal(shard_col, pa.scalar(int(s), pa.int32()))))
        out = join_shard(job, int(s), batch_id, rows, drain)
        yield from out.to_batches()


class ResidentHost:
    """The driver side of hosting A."""

    def __init__(self, spark: SparkSession, job: ShardJob) -> None:
        self.spark = spark
        self.job = job
        self.labels = partition_labels(spark, job.shards)
        self._routed = from_arrow_schema(job.routed_schema())
        self._out = from_arrow_schema(job.output_schema())

    def joined(self, df: DataFrame, batch_id: int, drain: bool = False) -> DataFrame:
        """Return the enriched rows of micro-batch ``batch_id`` (lazy)."""
        job = self.job
        routed = df.select(*job.stream_schema.names).mapInArrow(
            partial(route_partition, job, self.labels), self._routed
        )
        shuffled = routed.repartition(job.shards, F.col(LABEL))
        return shuffled.mapInArrow(partial(join_partition, job, batch_id, drain), self._out)

    def write_batch(self, df: DataFrame, batch_id: int, out_dir: str, drain: bool = False) -> None:
        """Join micro-batch ``batch_id`` and replace ``<out_dir>/batch=<id>`` with its rows."""
        self.joined(df, batch_id, drain).write.mode("overwrite").parquet(f"{out_dir}/batch={batch_id}")

    def drain(self, batch_id: int, out_dir: str) -> None:
        """Finish every waiting tuple of every shard (end of input) as batch ``batch_id``."""
        empty = self.spark.createDataFrame([], from_arrow_schema(self.job.stream_schema)).repartition(1)
        self.write_batch(empty, batch_id, out_dir, drain=True)

    def shard_meta(self, shard: int, batch_id: int) -> dict[str, Any]:
        """Return what the executor recorded with the shard's checkpoint of ``batch_id``."""
        return dict(SemiStreamJoin.checkpoint_meta(self.job.store(shard), batch_id))
