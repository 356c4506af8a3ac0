"""The join in Spark's executors (``join.placement: executors``): what runs there, one shard per task.

Per micro-batch the driver (:mod:`ssbj.pipeline.shardedrun`) builds two stages; the code of
both is here and holds no driver state:

1. :func:`decode_route` (``mapInArrow`` over the raw records, one task per source
   partition): decode records into typed rows and dead letters, give each a sequence
   number (source partition, position) and a shard (rows by join key through the plan's
   router; dead letters spread over the shards);
2. :func:`run_shards` (``mapInArrow`` after ``repartition(P, label)``, one task per shard):
   the shard's :class:`~ssbj.pipeline.processor.EnrichmentProcessor`, exactly the one the
   driver placement runs, over the shard's share of R (pushed down into the SQL of every
   partition read), with its budget / P, its own checkpoint directory
   ``<checkpoint>/shards/shard-<s>``, and sinks that write segment ``segment * MAX_SHARDS +
   s`` of the batch (:func:`ssbj.contracts.shard_segment`). It yields one summary row
   (progress and counts) per shard, which is all the driver collects.

Exactly once per (batch, shard) follows from the processor's own rules (sink replaces the
(batch, segment) it writes, checkpoint after the sink, a batch id not newer than the
shard's checkpoint is a replay from the checkpoint before it), applied per shard: a shard
that finished batch N before a failure replays N from N - 1 like the others. The
operator stays resident in the Python worker between batches when the same worker gets
the shard again and the shard's newest checkpoint is still the one it wrote; otherwise it
is restored from that checkpoint (checkpoints must be on storage every executor reads).
A file lock per shard keeps two attempts of one shard (a retry racing a lost task) on one
host from interleaving their checkpoints; across hosts that needs the checkpoint store's
own atomicity (not provided by a plain directory: docs/sharding.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import SecretStr

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.adapters.sink_parquet import ParquetDirSink
from ssbj.adapters.sink_sql import SqlTableSink
from ssbj.config import DatabaseSink, JobConfig, ParquetSink
from ssbj.contracts import DEAD_LETTER_SCHEMA, CheckpointedMasterScan, WarehouseSink, shard_segment
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.keys import key_family
from ssbj.core.operator import SemiStreamJoin
from ssbj.core.shards import HashRouter, Router, route_column
from ssbj.credentials import engine_for_url, needs_local_infile
from ssbj.errors import StateError
from ssbj.pipeline.factory import master_scan, read_ahead
from ssbj.pipeline.partwriter import parts_sink
from ssbj.pipeline.processor import EnrichmentProcessor
from ssbj.pipeline.records import Decoded, decoder
from ssbj.pipeline.shardplan import ShardPlan

SHARD = "_ssbj_shard"  # the row's shard
LABEL = "_ssbj_label"  # what Spark hash-partitions by: label s lands in Spark partition s
KIND = "_ssbj_kind"  # ROW, DEAD or BEAT
SEQ = "_ssbj_seq"  # (source partition << 32) + position: the order a shard pushes its rows in
DL = "_ssbj_dl_"  # prefix of the dead-letter columns
ROW, DEAD, BEAT = 0, 1, 2

SUMMARY_SCHEMA = pa.schema(
    [
        pa.field("shard", pa.int32()),
        pa.field("progress", pa.string()),
        pa.field("counts", pa.string()),
        pa.field("resident", pa.bool_()),
        pa.field("seconds", pa.float64()),
        pa.field("started", pa.float64()),  # wall clock (epoch seconds): the timeline of the shards' tasks
        pa.field("pid", pa.int64()),
        pa.field("stage1_read", pa.float64()),
        pa.field("stage1_decode", pa.float64()),
        pa.field("stage1_started", pa.float64()),
        pa.field("executor", pa.string()),  # the task's executor as a Spark task location (None: unknown)
    ]
)
"""What a shard's task returns to the driver: one row per shard."""


@dataclass(frozen=True)
class ExecutorJob:
    """A job as the executors see it: picklable, secrets resolved by the driver (never logged)."""

    cfg: JobConfig
    plan: ShardPlan
    labels: tuple[int, ...]  # label of shard s: Spark's hash partitioning sends it to partition s
    master_url: SecretStr
    sink_url: SecretStr | None = None
    dead_letter_url: SecretStr | None = None
    source_options: SecretStr | None = None  # join.exchange read: the Kafka reader's options as JSON
    _memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # per process

    @property
    def shards(self) -> int:
        """P."""
        return self.plan.shards

    @property
    def router(self) -> Router:
        """The plan's router (made once per process)."""
        if "router" not in self._memo:
            self._memo["router"] = self.plan.make_router()
        router: Router = self._memo["router"]
        return router

    @property
    def fingerprint(self) -> str:
        """What makes a resident operator this job's: the job file's content and the shard plan."""
        if "fingerprint" not in self._memo:
            doc = json.dumps([self.cfg.model_dump(mode="json"), self.plan.to_json()], sort_keys=True, default=str)
            self._memo["fingerprint"] = hashlib.sha256(doc.encode()).hexdigest()
        return str(self._memo["fingerprint"])

    @property
    def root(self) -> Path:
        """``<checkpoint>/shards``."""
        return Path(self.cfg.checkpoint) / "shards"

    def routed_schema(self) -> pa.Schema:
        """Stream columns, dead-letter columns and the routing columns."""
        fields = [pa.field(f.name, f.type) for f in self.cfg.stream_schema]
        fields += [pa.field(DL + f.name, f.type) for f in DEAD_LETTER_SCHEMA]
        fields += [
            pa.field(SEQ, pa.int64()),
            pa.field(SHARD, pa.int32()),
            pa.field(LABEL, pa.int32()),
            pa.field(KIND, pa.int8()),
        ]
        return pa.schema(fields)

    def store(self, shard: int) -> DirectoryStore:
        """Shard ``shard``'s checkpoint directory."""
        return DirectoryStore(self.root / f"shard-{shard}")


# ---------------------------------------------------------------- stage 1: decode and route
def routed(job: ExecutorJob, part: int, decoded: Decoded, base: int = 0) -> pa.Table:
    """Return ``decoded``'s rows and dead letters with their sequence numbers (from ``base``), shards and labels."""
    schema = job.routed_schema()
    rows, dead = decoded.rows, decoded.dead
    n, d = rows.num_rows, dead.num_rows
    stream = job.cfg.stream_schema
    shard = np.empty(n + d, dtype=np.int32)
    if n:
        family = key_family(stream.field(job.cfg.join.stream_key).type)
        shard[:n] = route_column(rows.column(job.cfg.join.stream_key), family, job.router)
    shard[n:] = (part + np.arange(d)) % job.shards  # dead letters: spread, deterministically
    labels = np.asarray(job.labels, dtype=np.int32)[shard]
    cols: list[pa.Array | pa.ChunkedArray] = []
    for f in stream:
        top = rows.column(f.name).cast(f.type) if n else pa.chunked_array([], f.type)
        cols.append(pa.concat_arrays([*top.chunks, pa.nulls(d, f.type)]) if d else top.combine_chunks())
    for f in DEAD_LETTER_SCHEMA:
        bottom = dead.column(f.name).cast(f.type).combine_chunks() if d else pa.array([], f.type)
        cols.append(pa.concat_arrays([pa.nulls(n, f.type), bottom]))
    seq = (np.int64(part) << np.int64(32)) + np.int64(base) + np.arange(n + d, dtype=np.int64)
    kind = np.concatenate([np.full(n, ROW, np.int8), np.full(d, DEAD, np.int8)])
    cols += [pa.array(seq), pa.array(shard), pa.array(labels), pa.array(kind)]
    return pa.Table.from_arrays(cols, schema=schema)


WIRE_SCHEMA = pa.schema(
    [
        pa.field(SHARD, pa.int32()),
        pa.field(LABEL, pa.int32()),
        pa.field("payload", pa.binary()),
        pa.field("read_seconds", pa.float64()),  # stage 1: waiting for the source's records
        pa.field("decode_seconds", pa.float64()),  # stage 1: decoding, routing, packing
        pa.field("started", pa.float64()),  # stage 1 task's start (epoch seconds)
    ]
)
"""What crosses the shuffle: per (source partition, shard) one row holding that shard's routed rows as one
Arrow IPC stream, so Spark moves a few binary values instead of converting every row to its own format. A
source task's timings ride on its first row only, so that summing over shards counts each task once."""


@dataclass
class Stage1:
    """What stage 1 reported to one shard's task: its rows and the source tasks' timings."""

    table: pa.Table | None
    read_seconds: float = 0.0
    decode_seconds: float = 0.0
    started: float | None = None


def pack(job: ExecutorJob, table: pa.Table, timing: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> pa.RecordBatch:
    """Return one wire row per shard present in ``table`` (a routed table); ``timing`` = (read, decode, start)."""
    shard_col = table.column(SHARD).to_numpy()
    shards, labels, payloads = [], [], []
    for s in np.unique(shard_col):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table.filter(pa.array(shard_col == s)))
        shards.append(int(s))
        labels.append(job.labels[int(s)])
        payloads.append(sink.getvalue().to_pybytes())
    first = [i == 0 for i in range(len(shards))]
    read, decode, started = timing
    return pa.RecordBatch.from_arrays(
        [
            pa.array(shards, pa.int32()),
            pa.array(labels, pa.int32()),
            pa.array(payloads, pa.binary()),
            pa.array([read if f else 0.0 for f in first], pa.float64()),
            pa.array([decode if f else 0.0 for f in first], pa.float64()),
            pa.array([started if f and started else None for f in first], pa.float64()),
        ],
        schema=WIRE_SCHEMA,
    )


def unpack(batches: Iterator[pa.RecordBatch]) -> Stage1:
    """Inverse of :func:`pack` over a task's input: every routed row (None without input) and the timings."""
    parts = []
    out = Stage1(None)
    for b in batches:
        for blob in b.column("payload").to_pylist():
            parts.append(pa.ipc.open_stream(pa.py_buffer(blob)).read_all())
        out.read_seconds += float(pc.sum(b.column("read_seconds")).as_py() or 0.0)
        out.decode_seconds += float(pc.sum(b.column("decode_seconds")).as_py() or 0.0)
        first = pc.min(b.column("started")).as_py()
        if first is not None:
            out.started = first if out.started is None else min(out.started, first)
    out.table = pa.concat_tables(parts) if parts else None
    return out


def decode_route(job: ExecutorJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stage 1: decode one source partition's raw records, route them, pack them per shard."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    decode = decoder(job.cfg)
    started, t = time.time(), time.perf_counter()
    read = work = 0.0
    parts: list[pa.Table] = []
    base = 0
    for b in batches:  # all of the input (see heartbeats), decoded batch by batch while the reader reads on
        t1 = time.perf_counter()
        read += t1 - t
        if b.num_rows:
            parts.append(routed(job, part, decode(pa.Table.from_batches([b])), base))
            base += parts[-1].num_rows
        t = time.perf_counter()
        work += t - t1
    if not parts:
        return
    yield pack(job, pa.concat_tables(parts), (read, work, started))  # work: decoding and routing, not packing


def heartbeats(job: ExecutorJob, _batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One row per shard, so that every shard runs in every micro-batch (its waiting tuples need steps)."""
    for _ in _batches:  # drain the input: a Python worker whose input was not read is not reused
        pass
    schema = job.routed_schema()
    p = job.shards
    cols = [pa.nulls(p, f.type) for f in schema][:-4]
    cols += [
        pa.array(np.full(p, -1, np.int64)),
        pa.array(np.arange(p, dtype=np.int32)),
        pa.array(np.asarray(job.labels, np.int32)),
        pa.array(np.full(p, BEAT, np.int8)),
    ]
    yield pack(job, pa.Table.from_arrays(cols, schema=schema))


# ---------------------------------------------------------------- stage 2: one shard
class ShardSink:
    """A warehouse sink seen through one shard: its segments are ``segment * MAX_SHARDS + shard``."""

    def __init__(self, inner: WarehouseSink, shard: int) -> None:
        self.inner = inner
        self.shard = shard

    def prepare(self, schema: pa.Schema) -> None:
        """Check (or create) the target."""
        self.inner.prepare(schema)

    def write(self, batch_id: int, segment: int, table: pa.Table) -> None:
        """Replace the shard's rows of (batch, segment)."""
        self.inner.write(batch_id, shard_segment(segment, self.shard), table)

    @property
    def overlap(self) -> bool:
        """Whether the inner sink loads parts while the join runs."""
        return parts_sink(self.inner) is not None

    def write_parts(self, batch_id: int, segment: int, parts: Iterator[pa.Table]) -> None:
        """Replace the shard's rows of (batch, segment) by the parts (the inner sink must load parts)."""
        inner = parts_sink(self.inner)
        if inner is None:
            raise StateError("ShardSink.write_parts: the sink does not load parts")
        inner.write_parts(batch_id, shard_segment(segment, self.shard), parts)

    def close(self) -> None:
        """Release connections."""
        self.inner.close()


_RESIDENT: dict[tuple[str, int, str], EnrichmentProcessor] = {}


def _sink(cfg: DatabaseSink | ParquetSink, url: SecretStr | None) -> WarehouseSink:
    if isinstance(cfg, ParquetSink):
        return ParquetDirSink(cfg.path)
    if url is None:
        raise StateError("a database sink needs its URL")
    local_infile = needs_local_infile(cfg, url)
    return SqlTableSink(
        engine_for_url(url, local_infile), cfg.table, create=cfg.create, bulk=cfg.bulk, overlap=cfg.overlap
    )


def shard_scan(job: ExecutorJob, shard: int, layout: dict[str, Any] | None, partition_rows: int) -> SqlMasterScan:
    """Shard ``shard``'s share of R, in partitions of ``partition_rows`` rows."""
    return master_scan(job.cfg.master, engine_for_url(job.master_url), layout, partition_rows, (job.router, shard))


def _share_schema(job: ExecutorJob, shard: int) -> pa.Schema:
    schema = shard_scan(job, shard, None, 1 << 30).schema  # reflection only: no layout, no rows read
    cols = job.cfg.master.columns
    return pa.schema([f for f in schema if cols is None or f.name in cols or f.name == job.cfg.master.key])


def _share_info(job: ExecutorJob, shard: int) -> tuple[int, pa.Schema]:
    scan = shard_scan(job, shard, None, 1 << 30)
    n = scan.count_rows()  # the share's rows (all of R for a hash router: no predicate)
    if isinstance(job.router, HashRouter):
        n = -(-n // job.shards)
    return n, _share_schema(job, shard)


def new_processor(job: ExecutorJob, shard: int) -> EnrichmentProcessor:
    """Shard ``shard``'s processor (not opened)."""
    cfg = job.cfg
    schema = _share_schema(job, shard)

    def factory(layout: dict[str, Any] | None, b: int) -> CheckpointedMasterScan:
        return read_ahead(shard_scan(job, shard, layout, b), cfg.master.prefetch)

    whole = cfg.join_settings(schema)  # one shard: a 1/P share of R within 1/P of the budget
    settings = dataclasses.replace(whole, memory_budget=max(1, whole.memory_budget // job.shards))
    return EnrichmentProcessor(
        settings,
        cfg.stream_schema,
        factory,
        lambda: _share_info(job, shard),
        ShardSink(_sink(cfg.sink, job.sink_url), shard),
        ShardSink(_sink(cfg.dead_letter, job.dead_letter_url), shard),
        job.store(shard),
    )


def stored_position(store: DirectoryStore) -> tuple[int, int]:
    """Return (batch id, segment) of the newest checkpoint in ``store``; (-1, 0) if none."""
    latest = store.latest()
    if latest is None:
        return (-1, 0)
    meta = SemiStreamJoin.checkpoint_meta(store, latest)
    return int(meta["batch_id"]), int(meta["segment"])


def _token(store: DirectoryStore) -> str | None:
    """Return the generation of the newest checkpoint in ``store`` (unique per checkpoint written)."""
    latest = store.latest()
    return None if latest is None else SemiStreamJoin.checkpoint_meta(store, latest).get("token")


def shard_processor(job: ExecutorJob, shard: int) -> tuple[EnrichmentProcessor, bool]:
    """Return the shard's processor at its newest checkpoint, and whether it was resident in this worker."""
    key = (str(job.root), shard, job.fingerprint)
    proc = _RESIDENT.pop(key, None)
    resident = proc is not None and proc.op is not None and proc.token is not None and proc.token == _token(proc.store)
    if proc is None:
        proc = new_processor(job, shard)
    if not resident:
        proc.reset()
        proc.open()
    return proc, resident


@contextlib.contextmanager
def shard_lock(job: ExecutorJob, shard: int) -> Iterator[None]:
    """Hold the shard's lock file (one attempt of a shard at a time on this host)."""
    path = job.root / f"shard-{shard}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _shard_input(job: ExecutorJob, table: pa.Table) -> Decoded:
    kind = table.column(KIND)
    rows = table.filter(pc.equal(kind, ROW))
    if rows.num_rows:
        rows = rows.sort_by(SEQ)
    dead = table.filter(pc.equal(kind, DEAD))
    if dead.num_rows:
        dead = dead.sort_by(SEQ)
    stream = job.cfg.stream_schema
    rows_t = pa.Table.from_arrays([rows.column(f.name) for f in stream], schema=stream)
    dead_t = pa.Table.from_arrays([dead.column(DL + f.name) for f in DEAD_LETTER_SCHEMA], schema=DEAD_LETTER_SCHEMA)
    return Decoded(rows_t, dead_t)


def run_shard(job: ExecutorJob, shard: int, batch_id: int, table: pa.Table, drain_after: int | None) -> dict[str, Any]:
    """Shard ``shard``'s part of batch ``batch_id`` (or, with ``drain_after``, its drain): the summary row."""
    t0, started = time.perf_counter(), time.time()
    decoded = _shard_input(job, table)
    key = (str(job.root), shard, job.fingerprint)
    with shard_lock(job, shard):
        t1 = time.perf_counter()
        proc, resident = shard_processor(job, shard)
        t2 = time.perf_counter()
        try:
            if drain_after is None:
                progress: dict[str, Any] | None = proc.process(batch_id, lambda: decoded)
            else:
                progress = proc.drain(lambda b: b <= drain_after)
        except BaseException:
            proc.reset()  # a failed attempt leaves nothing resident: the next one restores
            raise
        _RESIDENT[key] = proc
        counts = proc.counts().to_dict()
    if progress is not None:  # the task's own work outside the processor's phases
        progress["seconds"] = {**progress["seconds"], "input": t1 - t0, "restore": t2 - t1}
    return {
        "shard": shard,
        "progress": json.dumps(progress, default=float) if progress is not None else None,
        "counts": json.dumps(counts),
        "resident": resident,
        "seconds": time.perf_counter() - t0,
        "started": started,
        "pid": os.getpid(),
    }


def run_shards(
    job: ExecutorJob, batch_id: int, drain_after: int | None, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Stage 2: every shard in this task (one, unless Spark merged partitions), in shard order."""
    stage1 = unpack(batches)
    table = stage1.table
    if table is None:
        return
    shard_col = table.column(SHARD)
    out: list[dict[str, Any]] = []
    for s in np.unique(shard_col.to_numpy()):
        sub = table.filter(pc.equal(shard_col, pa.scalar(int(s), pa.int32())))
        row = run_shard(job, int(s), batch_id, sub, drain_after)
        if not out:  # the task's stage-1 timings go with its first shard
            row.update(
                stage1_read=stage1.read_seconds, stage1_decode=stage1.decode_seconds, stage1_started=stage1.started
            )
        out.append(row)
    yield pa.RecordBatch.from_pylist(out, schema=SUMMARY_SCHEMA)
