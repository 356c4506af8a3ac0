"""The driver's side of ``join.placement: executors``: plan, launch the two stages per micro-batch, sum up.

The driver holds no join state. Per micro-batch it plans nothing new: the shard plan
(:mod:`ssbj.pipeline.shardplan`) is fixed, each shard's operator plans its own b and w
from its share. It launches stage 1 (decode and route) and stage 2 (one task per shard)
of :mod:`ssbj.pipeline.executors`, collects one summary row per shard, and turns them
into the job's progress record and counts. Spark commits the batch after this returns;
a batch that fails anywhere is replayed by Spark and every shard replays it from its own
checkpoint. Draining (end of an ``available-now`` run, or an idle stream) is one more
stage-2 job fed only with heartbeats, run once Spark has committed the last batch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

from pydantic import SecretStr

from ssbj.config import DatabaseSink, JobConfig, KafkaSource
from ssbj.contracts import DEAD_LETTER_SCHEMA, MAX_SHARDS, RunCounts, shard_segment
from ssbj.core.master import ArrowMaster
from ssbj.core.operator import SemiStreamJoin
from ssbj.credentials import database_url
from ssbj.errors import TransientError
from ssbj.logs import fields
from ssbj.pipeline import factory
from ssbj.pipeline.executors import (
    LABEL,
    SUMMARY_SCHEMA,
    WIRE_SCHEMA,
    ExecutorJob,
    decode_route,
    heartbeats,
    run_shards,
    stored_position,
)
from ssbj.pipeline.shardplan import load_or_create
from ssbj.pipeline.shardread import located_tasks, read_shards
from ssbj.planning import join_spec

log = logging.getLogger("ssbj.progress")

POOL_ENV = "SSBJ_PYTHON_POOL"  # marks stage 2's Python functions: their workers form a pool of their own

# Spark's messages when a lost executor takes shuffle output with it: a job whose shuffle map
# stage is "indeterminate" (Python UDF output) cannot be retried inside the query, but a
# restarted query replays the batch, and every shard replays it from its own checkpoint
DRAIN_ATTEMPTS = 3
EXECUTOR_LOSS = ("indeterminate output", "ExecutorLostFailure", "FetchFailed", "ExecutorDeadException")


def partition_labels(spark: Any, shards: int) -> tuple[int, ...]:
    """For each shard s, an int whose Spark hash partitioning into ``shards`` partitions is s."""
    from pyspark.sql import functions as F

    ids = F.col("id").cast("int")
    rows = spark.range(shards * 64).select(ids.alias("l"), F.pmod(F.hash(ids), F.lit(shards)).alias("p")).collect()
    first: dict[int, int] = {}
    for r in rows:
        first.setdefault(int(r["p"]), int(r["l"]))
    return tuple(first[s] for s in range(shards))


@contextlib.contextmanager
def shard_worker_pool(spark: Any) -> Iterator[None]:
    """Give the Python functions made inside a Python worker pool of their own (per executor).

    Spark keys its pools of reused Python workers by the function's environment variables
    (``SparkEnv.createPythonWorker``), so a marker variable in the context's environment while
    stage 2's function is made keeps stage 1 (and the source reader) off the shards' workers:
    with one shard per executor the shard's task finds the worker that holds its operator.
    """
    env = spark.sparkContext.environment
    before = env.get(POOL_ENV)
    env[POOL_ENV] = "shards"
    try:
        yield
    finally:
        if before is None:
            env.pop(POOL_ENV, None)
        else:
            env[POOL_ENV] = before


class ShardedRun:
    """Drives the shards of one job from the driver (the processor interface :class:`EnrichmentJob` uses)."""

    def __init__(self, cfg: JobConfig) -> None:
        self.cfg = cfg
        self.spark: Any = None
        self.job: ExecutorJob | None = None
        self.lock = threading.RLock()
        self.last_progress: dict[str, Any] = {}
        self._counts: dict[int, RunCounts] = {}
        self._position = (-1, 0)
        self._waiting = 0
        self._last_end = time.time()
        self._where: dict[int, str] = {}  # shard -> the executor its operator is resident in (exchange: read)

    # ------------------------------------------------------------------ state
    def open(self) -> None:
        """Load (or make) the shard plan, prepare the sinks once, read every shard's counts."""
        if self.job is not None:
            return
        if self.spark is None:
            raise RuntimeError("ShardedRun.open needs the Spark session (set .spark first)")
        cfg = self.cfg
        plan = load_or_create(cfg, int(self.spark.sparkContext.defaultParallelism))
        self.job = ExecutorJob(
            cfg,
            plan,
            partition_labels(self.spark, plan.shards),
            database_url(cfg.master),
            database_url(cfg.sink) if isinstance(cfg.sink, DatabaseSink) else None,
            database_url(cfg.dead_letter) if isinstance(cfg.dead_letter, DatabaseSink) else None,
            _reader_options(cfg),
        )
        self._prepare_sinks()
        for s in range(plan.shards):
            store = self.job.store(s)
            latest = store.latest()
            if latest is not None:
                meta = SemiStreamJoin.checkpoint_meta(store, latest)
                self._counts[s] = RunCounts(**meta["counts"])
                self._position = max(self._position, stored_position(store))
        self._waiting = sum(c.waiting for c in self._counts.values())
        log.info(
            "join in the executors: %d shards, %s router",
            plan.shards,
            plan.router,
            extra=fields(event="shards", shards=plan.shards, router=plan.router),
        )

    def _prepare_sinks(self) -> None:
        """Create (or check) the warehouse and dead-letter targets once, before any shard writes."""
        cfg = self.cfg
        master = factory.MasterSource(cfg)
        schema = master.schema()
        factory.check_key_types(cfg, schema)
        settings = cfg.join_settings(schema)
        empty = ArrowMaster(schema.empty_table(), 1)
        out = SemiStreamJoin(join_spec(settings, 1), empty, cfg.stream_schema, schema).output_schema
        for sink_cfg, target in ((cfg.sink, out), (cfg.dead_letter, DEAD_LETTER_SCHEMA)):
            sink = factory.build_sink(sink_cfg)
            try:
                sink.prepare(target)
            finally:
                sink.close()

    def reset(self) -> None:
        """Nothing to forget: the driver holds no join state (shards restore themselves)."""

    def position(self) -> tuple[int, int]:
        """(batch id, segment column value) covering every shard's newest checkpoint; (-1, 0) before any.

        In the segment column's coordinates (segment * MAX_SHARDS + shard), so that the audit's
        (batch id, segment) ranges hold every shard's rows of a run.
        """
        batch, segment = self._position
        return (batch, shard_segment(segment, MAX_SHARDS - 1)) if batch >= 0 else (batch, segment)

    def counts(self) -> RunCounts:
        """Return the job's counts: the sum over shards."""
        total = RunCounts()
        for c in self._counts.values():
            total = RunCounts(**{k: total[k] + c[k] for k in total})
        return total

    # ------------------------------------------------------------------ batches
    def _job(self) -> ExecutorJob:
        if self.job is None:
            self.open()
        assert self.job is not None  # noqa: S101
        return self.job

    def _stage2(self, routed: Any, batch_id: int, drain_after: int | None) -> list[dict[str, Any]]:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        job = self._job()
        shuffled = routed.repartition(job.shards, F.col(LABEL))
        with shard_worker_pool(self.spark):
            out = shuffled.mapInArrow(
                partial(run_shards, job, batch_id, drain_after), from_arrow_schema(SUMMARY_SCHEMA)
            )
        return self._collected(out, batch_id)

    def _read_stage(self, ranges: list[Any], batch_id: int, drain_after: int | None) -> list[dict[str, Any]]:
        """One task per shard, on the executor its state is resident in: each reads ``ranges`` and runs its shard."""
        job = self._job()
        items = [(s, self._where.get(s)) for s in range(job.shards)]
        with shard_worker_pool(self.spark):
            tasks = located_tasks(self.spark, items).mapPartitions(
                partial(read_shards, job, batch_id, drain_after, ranges)
            )
            tasks._jrdd  # noqa: B018 - the Python function (and the pool's environment) is made here
        return self._collected(tasks, batch_id)

    def _collected(self, tasks: Any, batch_id: int) -> list[dict[str, Any]]:
        job = self._job()
        try:
            rows = [r if isinstance(r, dict) else r.asDict() for r in tasks.collect()]
        except Exception as exc:
            if any(m in str(exc) for m in EXECUTOR_LOSS):
                raise TransientError(
                    f"batch {batch_id}: an executor was lost and Spark could not retry the shard stage "
                    f"({type(exc).__name__}); the query restarts and replays the batch from the checkpoint"
                ) from exc
            raise
        got = sorted(r["shard"] for r in rows)
        if got != list(range(job.shards)):
            raise RuntimeError(f"batch {batch_id}: shards {got} reported, expected 0..{job.shards - 1}")
        for r in rows:
            if r.get("executor"):
                self._where[int(r["shard"])] = str(r["executor"])
        return rows

    def _beats(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema

        job = self._job()
        return self.spark.range(1, numPartitions=1).mapInArrow(partial(heartbeats, job), from_arrow_schema(WIRE_SCHEMA))

    def process_frame(self, df: Any, batch_id: int) -> dict[str, Any]:
        """Micro-batch ``batch_id`` of raw records ``df``, joined and written by the shards."""
        from pyspark.sql.pandas.types import from_arrow_schema

        with self.lock:
            job = self._job()
            t0 = time.perf_counter()
            if self.cfg.join.exchange == "read":  # the frame holds the batch's offset ranges: the shards read
                ranges = sorted((str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in df.collect())
                rows = self._read_stage(ranges, batch_id, None)
                return self._summarise("batch", batch_id, 0, rows, time.perf_counter() - t0)
            routed = df.mapInArrow(partial(decode_route, job), from_arrow_schema(WIRE_SCHEMA))
            rows = self._stage2(routed.unionByName(self._beats()), batch_id, None)
            return self._summarise("batch", batch_id, 0, rows, time.perf_counter() - t0)

    def drain(self, is_committed: Any) -> dict[str, Any] | None:
        """Finish every shard's waiting tuples, as a new segment of the last committed batch."""
        with self.lock:
            self._job()
            last, segment = self._position
            if last < 0 or self._waiting == 0 or not is_committed(last):
                return None
            t0 = time.perf_counter()
            for attempt in range(1, DRAIN_ATTEMPTS + 1):
                try:  # a drain is idempotent per shard: a shard that drained has nothing left to wait for
                    if self.cfg.join.exchange == "read":
                        rows = self._read_stage([], last, last)
                    else:
                        rows = self._stage2(self._beats(), last, last)
                    break
                except TransientError:
                    if attempt == DRAIN_ATTEMPTS:
                        raise
                    log.warning("drain failed (attempt %d of %d); retrying", attempt, DRAIN_ATTEMPTS)
            return self._summarise("drain", last, segment + 1, rows, time.perf_counter() - t0)

    def _summarise(
        self, event: str, batch_id: int, segment: int, rows: list[dict[str, Any]], wall: float
    ) -> dict[str, Any]:
        started = time.time() - wall
        shards = []
        for r in sorted(rows, key=lambda r: r["shard"]):
            c = json.loads(r["counts"])
            self._counts[int(r["shard"])] = RunCounts(**c)
            p = json.loads(r["progress"]) if r["progress"] else None
            shards.append(
                {
                    "shard": r["shard"],
                    "resident": r["resident"],
                    "seconds": r["seconds"],
                    "started": r["started"],
                    "pid": r["pid"],
                    "stage1": (r.get("stage1_read") or 0.0, r.get("stage1_decode") or 0.0, r.get("stage1_started")),
                    "progress": p,
                }
            )
        seen = [s["progress"] for s in shards if s["progress"] is not None]
        positions = [(p["batch_id"], p["segment"]) for p in seen]
        if positions:
            self._position = max(self._position, *positions)
        self._waiting = sum(c.waiting for c in self._counts.values())
        now = time.time()
        arrival_wall = max(now - self._last_end, 1e-9)
        self._last_end = now
        total = self.counts()
        records = sum(p["records_in"] for p in seen)
        memory: dict[str, float] = {}
        for p in seen:
            for k, v in p["memory"].items():
                memory[k] = memory.get(k, 0) + (v if isinstance(v, int | float) else 0)
        progress: dict[str, Any] = {
            "event": event,
            "batch_id": batch_id,
            "segment": segment,
            "placement": "executors",
            "shards": len(shards),
            "records_in": records,
            "stream_rows": sum(p["stream_rows"] for p in seen),
            "dead_letters": sum(p["dead_letters"] for p in seen),
            "output_rows": sum(p["output_rows"] for p in seen),
            "steps": max((p["steps"] for p in seen), default=0),
            "arrival_rate": records / arrival_wall,
            "completed_tuples": sum(p["completed_tuples"] for p in seen),
            "service_rate": sum(p["service_rate"] for p in seen),  # the shards serve in parallel
            "cache_hit_share": _weighted(seen, "cache_hit_share", "completed_tuples"),
            "r_cycle": min((p["r_cycle"] for p in seen), default=0),
            "partition": None,
            "partitions": None,
            "waiting_tuples": self._waiting,
            "memory": memory,
            "started": started,
            "seconds": {
                "wall": wall,
                "shard_task_max": max(s["seconds"] for s in shards),
                "stage1_read": sum(s["stage1"][0] for s in shards),  # summed over the source tasks
                "stage1_decode": sum(s["stage1"][1] for s in shards),
            },
            "stage1_started": min((s["stage1"][2] for s in shards if s["stage1"][2]), default=None),
            "per_shard": [
                {
                    "shard": s["shard"],
                    "resident": s["resident"],
                    "pid": s["pid"],
                    "task_started": s["started"],
                    "task_seconds": s["seconds"],
                    **(
                        {k: s["progress"][k] for k in ("records_in", "output_rows", "waiting_tuples", "seconds")}
                        if s["progress"]
                        else {}
                    ),
                }
                for s in shards
            ],
            "totals": {
                "records_in": total.records_in,
                "dead_letters": total.dead_letters,
                "stream_rows": total.records_in - total.dead_letters,
                "matched_source_rows": total.matched_source_rows,
                "unmatched_source_rows": total.unmatched_source_rows,
                "waiting": total.waiting,
                "output_rows": total.output_rows,
                "cache_share": _weighted(seen, "cache_hit_share", "completed_tuples"),
            },
        }
        self.last_progress = progress
        log.info(
            "%s %d.%d: %d records, %d rows out, %d waiting (%d shards)",
            event,
            batch_id,
            segment,
            records,
            progress["output_rows"],
            self._waiting,
            len(shards),
            extra=fields(**{k: v for k, v in progress.items() if k != "per_shard"}),
        )
        return progress


def _reader_options(cfg: JobConfig) -> SecretStr | None:
    """Return the Kafka reader's options for shards that read the records themselves (secrets: a SecretStr)."""
    if cfg.join.exchange != "read" or not isinstance(cfg.source, KafkaSource):
        return None
    return SecretStr(json.dumps(factory.kafka_reader_options(cfg.source)))


def _weighted(seen: list[dict[str, Any]], key: str, weight: str) -> float:
    w = sum(p[weight] for p in seen)
    return sum(p[key] * p[weight] for p in seen) / w if w else 0.0
