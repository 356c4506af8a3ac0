"""Run both Spark hostings of shard state on local-cluster[2,1,1024] with injected faults; print JSON.

Run by tests/pipeline/test_shardhost.py (with tests/ on PYTHONPATH) in its own process (its own JVM: the test session's
``spark`` fixture is a local[2] one, and one process holds one SparkContext).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from reference import batch_join

from ssbj.bench.exp_sharding import session
from ssbj.core import JoinSpec
from ssbj.core.shards import HashRouter, ModRouter
from ssbj.pipeline.shardedrun import partition_labels
from ssbj.pipeline.shardexec import ShardJob
from ssbj.pipeline.shardhost import ResidentHost, read_events
from ssbj.pipeline.shardstate import parquet_sink, stateful_frame

FILES = 4
SCHEMA = pa.schema([("sid", pa.int64()), ("sk", pa.int64())])


def make_data(root: Path) -> tuple[pa.Table, pa.Table, list[str]]:
    rng = np.random.default_rng(7)
    mk = rng.integers(0, 300, 900).astype(object)
    mk[rng.choice(900, 20, replace=False)] = None  # NULL master keys match nothing
    master = pa.table(
        {"mk": pa.array(mk.tolist(), pa.int64()), "mid": np.arange(900), "attr": rng.integers(0, 99, 900)}
    )
    pq.write_table(master, root / "master.parquet")
    hot = rng.integers(0, 400, 5)  # some hot keys have no master row
    paths = []
    parts = []
    for i in range(FILES):
        n = 700
        sk = np.where(rng.random(n) < 0.5, rng.choice(hot, n), rng.integers(0, 400, n)).astype(object)
        sk[rng.random(n) < 0.03] = None
        t = pa.table({"sid": pa.array(np.arange(i * n, (i + 1) * n)), "sk": pa.array(sk.tolist(), pa.int64())})
        (root / "stream").mkdir(exist_ok=True)
        paths.append(str(root / "stream" / f"part-{i}.parquet"))
        pq.write_table(t, paths[-1])
        parts.append(t)
    return pa.concat_tables(parts), master, paths


def multiset(path: str) -> Counter[Any]:
    t = pq.read_table(path, columns=["sid", "sk", "mid", "attr"])
    cols = [c.to_pylist() for c in t.columns]
    return Counter(zip(*cols, strict=True))


def job(root: Path, name: str, router: Any, faults: list[str]) -> ShardJob:
    debug = root / name / "debug"
    debug.mkdir(parents=True)
    for f in faults:
        (debug / f).touch()
    spec = JoinSpec("sk", "mk", ("mid", "attr"), chunk_bytes=2_000, memory_budget=120_000)
    return ShardJob(
        name, spec, router, SCHEMA, str(root / "master.parquet"), 60, str(root / name / "shards"), "sid", str(debug)
    )


def resident(spark: Any, root: Path, paths: list[str], expected: Counter[Any]) -> dict[str, Any]:
    """Hosting A, batch by batch: a task retry (raise), a dead Python worker (exit), a replayed batch."""
    j = job(root, "resident", HashRouter(2), ["1-0-raise", "2-1-exit"])
    host = ResidentHost(spark, j)
    out = str(root / "resident" / "out")
    frames = [spark.read.parquet(p) for p in paths]
    for i, df in enumerate(frames):
        host.write_batch(df, i, out)
    host.write_batch(frames[-1], FILES - 1, out)  # Spark replays the last batch (crash before its commit)
    host.drain(FILES, out)
    return {
        "exact": multiset(out) == expected,
        "rows": sum(multiset(out).values()),
        "events": read_events(j.debug_dir or ""),
    }


def statestore(spark: Any, root: Path, expected: Counter[Any]) -> dict[str, Any]:
    """Hosting B, streaming: a task of batch 1 fails after it updated its state; then idle drain."""
    j = job(root, "statestore", ModRouter(2), ["1-1-raise"])
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    src = spark.readStream.schema("sid long, sk long").option("maxFilesPerTrigger", 1).parquet(str(root / "stream"))
    out = str(root / "statestore" / "out")
    drained: list[int] = []
    frame = stateful_frame(src, j, partition_labels(spark, 2), 1500)
    q = frame.writeStream.foreachBatch(parquet_sink(out, lambda b, f: drained.append(f)))
    q = q.option("checkpointLocation", str(root / "statestore" / "spark")).start()
    deadline = time.monotonic() + 120
    while sum(drained) < 2 and q.exception() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    error = q.exception()
    q.stop()
    got = multiset(out)
    return {
        "exact": got == expected,
        "rows": sum(got.values()),
        "error": str(error) if error else None,
        "events": read_events(j.debug_dir or ""),
    }


def statestore_replay(spark: Any, root: Path, paths: list[str], expected: Counter[Any]) -> dict[str, Any]:
    """Hosting B: the query stops after batch 1, batch 1's commit is lost, the restarted query replays it."""
    j = job(root, "replay", ModRouter(2), [])
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    landing = root / "landing-replay"
    landing.mkdir()
    for p in paths[:2]:
        shutil.copy(p, landing)
    out, ckpt = str(root / "replay" / "out"), root / "replay" / "spark"
    labels = partition_labels(spark, 2)

    def start(drained: list[int], timeouts: bool) -> Any:
        # without no-data batches the query runs a batch only for a new file: it stops at batch 1 at any load
        spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", str(timeouts).lower())
        src = spark.readStream.schema("sid long, sk long").option("maxFilesPerTrigger", 1).parquet(str(landing))
        frame = stateful_frame(src, j, labels, 2500)
        writer = frame.writeStream.foreachBatch(parquet_sink(out, lambda b, f: drained.append(f)))
        return writer.option("checkpointLocation", str(ckpt)).trigger(processingTime="0 seconds").start()

    q = start([], timeouts=False)
    deadline = time.monotonic() + 120
    while not (ckpt / "commits" / "1").exists() and q.exception() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    q.stop()
    logged = sorted(int(f.name) for f in (ckpt / "offsets").iterdir() if f.name.isdigit())
    if logged[-1] != 1:
        raise RuntimeError(f"the first query ran past batch 1 (offsets {logged})")
    for name in ("1", ".1.crc"):  # as if the driver died after the batch, before its commit
        (ckpt / "commits" / name).unlink(missing_ok=True)
    for p in paths[2:]:
        shutil.copy(p, landing)
    drained: list[int] = []
    q = start(drained, timeouts=True)
    deadline = time.monotonic() + 120
    while sum(drained) < 2 and q.exception() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    error = q.exception()
    q.stop()
    got = multiset(out)
    return {
        "exact": got == expected,
        "rows": sum(got.values()),
        "error": str(error) if error else None,
        "events": read_events(j.debug_dir or ""),
    }


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="ssbj-shard-scenarios-"))
    stream, master, paths = make_data(root)
    expected = batch_join(stream, master, "sk", "mk", ["mid", "attr"])
    spark = session()
    result = {"expected_rows": sum(expected.values())}
    result["resident"] = resident(spark, root, paths, expected)
    result["statestore"] = statestore(spark, root, expected)
    result["statestore_replay"] = statestore_replay(spark, root, paths, expected)
    print(json.dumps(result), flush=True)  # before the stop: local-cluster's shutdown logs noise to stderr
    spark.stop()


if __name__ == "__main__":
    main()
