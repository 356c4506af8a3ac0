"""``join.exchange: read``: each shard's task reads the micro-batch's Kafka records itself (executor side).

With ``exchange: shuffle`` a micro-batch costs two Spark stages: source tasks (the Kafka
reader's Python worker, rows through the JVM, a second Python worker that decodes and
routes) and, after a shuffle, one task per shard. With ``exchange: read`` the streaming
source emits only the batch's offset ranges (``emit=ranges``: one row per Kafka
partition); the driver collects them and starts one task per shard, and each task reads
every range with the source's own :func:`~ssbj.adapters.kafka_source.read_range`, decodes
and routes exactly as stage 1 would (same sequence numbers: a range's index is the source
partition's), keeps its shard's rows and dead letters, and runs the shard
(:func:`ssbj.pipeline.executors.run_shard`). Records reach a shard without passing through
the JVM or a shuffle; each shard decodes the whole batch (P times the decoding: the price,
measured in bench/pipeline/README.md).

Because a task's input is only the ranges, the driver can say where it runs: each task
prefers the executor that ran the shard last (:func:`executor_location`, reported with the
summary), so the operator stays resident in that executor's Python worker instead of
being restored from its checkpoint. Exactly once is the processor's, as with the shuffle:
a replayed batch reads the same offset ranges (they are Spark's offsets of that batch).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ssbj.errors import StateError
from ssbj.pipeline.executors import SHARD, ExecutorJob, routed, run_shard
from ssbj.pipeline.records import decoder

Range = tuple[str, int, int, int]
"""(topic, partition, start, end): one Kafka partition's offsets ``[start, end)`` of a micro-batch."""

_RAW = ("value", "topic", "partition", "offset")  # the columns the decoder reads (the source frame's selection)


def executor_location() -> str | None:
    """Return this Python worker's executor as a Spark task location (``executor_<host>_<id>``), None if unknown.

    A Python worker is a child of its executor JVM (through the worker daemon); the executor
    backend's command line names it (``--executor-id``, ``--hostname``). Linux only (/proc);
    in ``local[*]`` there is no such process and tasks go wherever Spark puts them.
    """
    pid = os.getppid()
    for _ in range(4):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            status = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        if "--executor-id" in args and "--hostname" in args:
            ident = args[args.index("--executor-id") + 1]
            host = args[args.index("--hostname") + 1]
            return f"executor_{host}_{ident}" if ident and host else None
        pid = int(status.rsplit(")", 1)[1].split()[1])  # the parent's pid (field 4 of stat)
        if pid <= 1:
            return None
    return None


def read_input(job: ExecutorJob, shard: int, ranges: list[Range]) -> tuple[pa.Table, float, float]:
    """Return shard ``shard``'s routed rows and dead letters of ``ranges``, and the seconds read and decoding took."""
    from ssbj.adapters.kafka_source import KafkaRange, KafkaSourceOptions, read_range  # optional extra: pyspark

    if job.source_options is None:
        raise StateError("join.exchange: read needs the Kafka reader's options")
    opts = KafkaSourceOptions.from_options(json.loads(job.source_options.get_secret_value()))
    decode = decoder(job.cfg)
    parts: list[pa.Table] = []
    read = work = 0.0
    for part, (topic, partition, start, end) in enumerate(ranges):  # part: the source partition's index
        t = time.perf_counter()
        raw = list(read_range(opts, KafkaRange(topic, partition, start, end)))
        t1 = time.perf_counter()
        read += t1 - t
        if raw:  # decoded whole: sequence numbers and dead letters' shards must not depend on how reads were cut
            table = routed(job, part, decode(pa.Table.from_batches(raw).select(list(_RAW))))
            parts.append(table.filter(pc.equal(table.column(SHARD), pa.scalar(shard, pa.int32()))))
        work += time.perf_counter() - t1
    table = pa.concat_tables(parts) if parts else job.routed_schema().empty_table()
    return table, read, work


def read_shards(
    job: ExecutorJob, batch_id: int, drain_after: int | None, ranges: list[Range], items: Iterator[Any]
) -> Iterator[dict[str, Any]]:
    """One task: each shard named in ``items`` (one, unless Spark merged partitions) reads its input and runs."""
    where = executor_location()
    for item in items:
        shard = int(item)
        t0, started = time.perf_counter(), time.time()
        table, read, decode = read_input(job, shard, ranges) if drain_after is None else _empty(job)
        row = run_shard(job, shard, batch_id, table, drain_after)
        row.update(stage1_read=0.0, stage1_decode=0.0, stage1_started=None, executor=where)
        if row["progress"] is not None:  # reading and decoding are the shard task's own work here
            p = json.loads(row["progress"])
            p["seconds"] = {**p["seconds"], "read": read, "decode": p["seconds"].get("decode", 0.0) + decode}
            row["progress"] = json.dumps(p)
        row["started"], row["seconds"] = started, time.perf_counter() - t0
        yield row


def _empty(job: ExecutorJob) -> tuple[pa.Table, float, float]:
    return job.routed_schema().empty_table(), 0.0, 0.0


# ---------------------------------------------------------------- driver side: tasks with a preferred executor
def located_tasks(spark: Any, items: list[tuple[int, str | None]]) -> Any:
    """Return a Python RDD with one partition per item (``int``), each preferring its location (None: anywhere).

    PySpark has no API for a task's preferred location; Spark's ``SparkContext.makeRDD``
    with location preferences (strings as ``TaskLocation`` parses them) does, reached through
    the JVM gateway, and a JVM RDD of strings is read by Python workers as UTF-8 text.
    """
    from pyspark import RDD
    from pyspark.serializers import UTF8Deserializer

    sc = spark.sparkContext
    jvm = sc._jvm
    conv = jvm.scala.jdk.javaapi.CollectionConverters
    pairs = jvm.java.util.ArrayList()
    for value, location in items:
        locs = jvm.java.util.ArrayList()
        if location:
            locs.add(location)
        pairs.add(jvm.scala.Tuple2(str(value), conv.asScala(locs).toSeq()))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("java.lang.String"))
    jrdd = sc._jsc.sc().makeRDD(conv.asScala(pairs).toSeq(), tag)
    return RDD(jrdd.toJavaRDD(), sc, UTF8Deserializer())  # type: ignore[no-untyped-call]
