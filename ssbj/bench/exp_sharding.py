"""Hosting shard state in Spark executors: A (resident in the Python worker) vs B (Spark's state store), P = 1 vs 2.

``python -m ssbj.bench.exp_sharding`` starts Spark on ``local-cluster[2,1,1024]`` (two
executors of one core), writes the paper's synthetic data (Zipf 1 stream over a master
table with repeated keys) as Parquet, and runs the same streaming enrichment four ways per
round, interleaved: hosting A and B, each with P = 1 and P = 2, every run with fresh
checkpoints. Each shard is planned with :func:`ssbj.pipeline.shardexec.plan_shard` (a 1/P
share of R within 1/P of the budget). The rate is stream tuples over the time from the
start of the first micro-batch to the end of the last one that had input (Spark's own
progress reports), so Spark start-up, the drain and the idle wait of B are not in it; each
run's output is checked against a batch join (DuckDB) after its drain. Read ratios measured
in the same process, not absolute numbers: the machine is small and shared.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from ssbj.bench.datagen import SyntheticStream, synthetic_master
from ssbj.core.shards import HashRouter
from ssbj.pipeline.shardedrun import partition_labels
from ssbj.pipeline.shardexec import ShardJob, plan_shard
from ssbj.pipeline.shardhost import ResidentHost, read_events
from ssbj.pipeline.shardstate import parquet_sink, stateful_frame
from ssbj.planning import JoinSettings, estimate_row_bytes

Json = dict[str, Any]
HOSTINGS = ("resident", "statestore")


@dataclass(frozen=True)
class Data:
    """The benchmark's files."""

    root: Path
    master_path: str
    stream_dir: str
    stream_rows: int
    master_rows: int
    stream_schema: pa.Schema
    v_s: float
    v_r: float


def make_data(root: Path, master_rows: int, stream_rows: int, files: int, skew: float, seed: int = 0) -> Data:
    """R as one Parquet file, the stream as ``files`` Parquet files of consecutive ``sid``."""
    master = synthetic_master(master_rows, seed=seed).select(["mk", "mid", "attr"])
    master_path = str(root / "master.parquet")
    pq.write_table(master, master_path)
    gen = SyntheticStream(master_rows, skew, seed=seed)
    stream_dir = root / "stream"
    stream_dir.mkdir(parents=True)
    per = -(-stream_rows // files)
    for i in range(files):
        n = min(per, stream_rows - i * per)
        t = gen.table(i * per, n, i).select(["sid", "sk"])
        pq.write_table(t, stream_dir / f"part-{i:04d}.parquet")
    schema = pa.schema([("sid", pa.int64()), ("sk", pa.int64())])
    v_r = estimate_row_bytes(master.schema, master.select(["mid", "attr"]))
    return Data(root, master_path, str(stream_dir), stream_rows, master_rows, schema, 16.0, v_r)


def session(master: str = "local-cluster[2,1,1024]") -> SparkSession:
    """Start a Spark session whose executors run this interpreter (the venv with ssbj)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(master)
        .appName("ssbj-sharding")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.task.maxFailures", "4")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def shard_job(data: Data, name: str, shards: int, budget: int, run_dir: Path, debug: bool = True) -> ShardJob:
    """Describe the sharded join of ``data``: P shards, each planned for its share and budget/P."""
    settings = JoinSettings(stream_key="sk", master_key="mk", master_columns=("mid", "attr"), memory_budget=budget)
    plan = plan_shard(settings, shards, data.v_s, data.master_rows, data.v_r)
    debug_dir = run_dir / "debug"
    debug_dir.mkdir(parents=True, exist_ok=True)
    return ShardJob(
        name=name,
        spec=plan.spec,
        router=HashRouter(shards),
        stream_schema=data.stream_schema,
        master_path=data.master_path,
        partition_rows=plan.partition_rows,
        checkpoint_root=str(run_dir / "shards"),
        order_by="sid",
        debug_dir=str(debug_dir) if debug else None,
    )


def _stream(spark: SparkSession, data: Data, files_per_batch: int) -> Any:
    return (
        spark.readStream.schema("sid long, sk long")
        .option("maxFilesPerTrigger", files_per_batch)
        .parquet(data.stream_dir)
    )


def _data_seconds(progress: list[Any]) -> tuple[float, int]:
    """Seconds from the first micro-batch's start to the end of the last one with input, and batches with input."""

    def start(p: Any) -> float:
        return dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()

    with_input = [p for p in progress if p["numInputRows"] > 0]
    if not with_input:
        return 0.0, 0
    last = with_input[-1]
    end = start(last) + last["durationMs"]["triggerExecution"] / 1000.0
    return end - start(with_input[0]), len(with_input)


def run_resident(spark: SparkSession, data: Data, job: ShardJob, run_dir: Path, files_per_batch: int) -> Json:
    """Hosting A over the whole stream (available-now), then the drain."""
    host = ResidentHost(spark, job)
    out = str(run_dir / "out")
    query = (
        _stream(spark, data, files_per_batch)
        .writeStream.foreachBatch(lambda df, bid: host.write_batch(df, int(bid), out))
        .option("checkpointLocation", str(run_dir / "spark"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds, batches = _data_seconds(query.recentProgress)
    t0 = time.perf_counter()
    host.drain(batches, out)
    return {"seconds": seconds, "batches": batches, "drain_seconds": time.perf_counter() - t0, "out": out}


def run_statestore(
    spark: SparkSession, data: Data, job: ShardJob, run_dir: Path, files_per_batch: int, idle_ms: int = 3000
) -> Json:
    """Hosting B until every shard has drained on its idle timeout."""
    spark.conf.set("spark.sql.shuffle.partitions", str(job.shards))  # P state-store partitions, fixed at first start
    labels = partition_labels(spark, job.shards)
    out = str(run_dir / "out")
    drained: list[int] = []

    def on_batch(batch_id: int, finals: int) -> None:
        drained.append(finals)

    frame = stateful_frame(_stream(spark, data, files_per_batch), job, labels, idle_ms)
    query = (
        frame.writeStream.foreachBatch(parquet_sink(out, on_batch))
        .option("checkpointLocation", str(run_dir / "spark"))
        .start()
    )
    deadline = time.monotonic() + 600
    while sum(drained) < job.shards and query.exception() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    error = query.exception()
    progress = query.recentProgress
    query.stop()
    if error is not None:
        raise RuntimeError(f"hosting B failed: {error}")
    seconds, batches = _data_seconds(progress)
    return {"seconds": seconds, "batches": batches, "out": out}


def reference_count(data: Data) -> int:
    """Rows of the batch join (DuckDB), for the exactness check."""
    con = duckdb.connect()
    q = f"SELECT count(*) FROM '{data.stream_dir}/*.parquet' s JOIN '{data.master_path}' m ON s.sk = m.mk"  # noqa: S608
    row = con.execute(q).fetchone()
    return int(row[0]) if row else 0


def exact(data: Data, out: str) -> bool:
    """Whether the run's output equals the batch join as a multiset (DuckDB EXCEPT ALL both ways)."""
    con = duckdb.connect()
    ref = (
        f"SELECT s.sid, s.sk, m.mid, m.attr FROM '{data.stream_dir}/*.parquet' s "  # noqa: S608
        f"JOIN '{data.master_path}' m ON s.sk = m.mk"
    )
    got = f"SELECT sid, sk, mid, attr FROM read_parquet('{out}/*/*.parquet')"  # noqa: S608
    both = (
        f"SELECT count(*) FROM (({ref}) EXCEPT ALL ({got})) UNION ALL SELECT count(*) FROM (({got}) EXCEPT ALL ({ref}))"  # noqa: S608
    )
    diff = con.execute(both).fetchall()  # the paths are made here, not user input
    return all(int(r[0]) == 0 for r in diff)


RUNNERS: dict[str, Callable[[SparkSession, Data, ShardJob, Path, int], Json]] = {
    "resident": run_resident,
    "statestore": run_statestore,
}


def summarize_events(debug_dir: str) -> Json:
    """Where shard operators came from (resident, checkpoint, replay, state, fresh), and state sizes."""
    events = read_events(debug_dir)
    sources: dict[str, int] = {}
    for e in events:
        sources[e["source"]] = sources.get(e["source"], 0) + 1
    sizes = [e["state_bytes"] for e in events if "state_bytes" in e]
    phases = {k: sum(e["seconds"][k] for e in events) for k in ("restore", "join", "checkpoint")}
    steps = sum(e["steps"] for e in events)
    return {
        "sources": sources,
        "max_state_bytes": max(sizes) if sizes else None,
        "task_seconds": phases,
        "steps": steps,
    }


def run(args: argparse.Namespace) -> Json:
    """Generate the data, run the rounds, return the results."""
    root = Path(tempfile.mkdtemp(prefix="ssbj-sharding-"))
    try:
        data = make_data(root, args.master_rows, args.stream_rows, args.files, args.skew)
        budget = int(args.budget_fraction * data.master_rows * (data.v_r + 8))
        spark = session(args.master)
        runs: list[Json] = []
        for hosting in HOSTINGS:  # warm-up, not counted: Python workers start, numba loads its cache
            RUNNERS[hosting](
                spark,
                data,
                shard_job(data, f"warm-{hosting}", 2, budget, root / f"warm-{hosting}"),
                root / f"warm-{hosting}",
                args.files_per_batch,
            )
        for rnd in range(args.rounds):
            for hosting in HOSTINGS:
                for shards in (1, 2):
                    name = f"{hosting}-p{shards}-r{rnd}"
                    run_dir = root / name
                    job = shard_job(data, name, shards, budget, run_dir)
                    r = RUNNERS[hosting](spark, data, job, run_dir, args.files_per_batch)
                    r.update(
                        hosting=hosting,
                        shards=shards,
                        round=rnd,
                        tuples_per_second=data.stream_rows / r["seconds"] if r["seconds"] else 0.0,
                        partition_rows=job.partition_rows,
                        exact=exact(data, r.pop("out")),
                        **summarize_events(str(run_dir / "debug")),
                    )
                    runs.append(r)
                    print(json.dumps(r), flush=True)
        spark.stop()
        return {
            "args": vars(args),
            "budget": budget,
            "reference_rows": reference_count(data),
            "runs": runs,
            "summary": summary(runs),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def summary(runs: list[Json]) -> Json:
    """Median tuples/s per (hosting, P), and the ratios that matter."""
    med: Json = {}
    for h in HOSTINGS:
        for p in (1, 2):
            rates = [r["tuples_per_second"] for r in runs if r["hosting"] == h and r["shards"] == p]
            med[f"{h}_p{p}"] = median(rates) if rates else None
    out: Json = {"median_tuples_per_second": med}
    for h in HOSTINGS:
        a, b = med.get(f"{h}_p2"), med.get(f"{h}_p1")
        out[f"{h}_p2_over_p1"] = a / b if a and b else None
    for p in (1, 2):
        a, b = med.get(f"resident_p{p}"), med.get(f"statestore_p{p}")
        out[f"resident_over_statestore_p{p}"] = a / b if a and b else None
    out["all_exact"] = all(r["exact"] for r in runs)
    return out


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m ssbj.bench.exp_sharding [--rounds 3 ...]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--master-rows", type=int, default=200_000)
    ap.add_argument("--stream-rows", type=int, default=800_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--files-per-batch", type=int, default=1)
    ap.add_argument("--skew", type=float, default=1.0)
    ap.add_argument("--budget-fraction", type=float, default=0.05, help="budget as a fraction of R's bytes")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    result = run(args)
    print(json.dumps(result["summary"], indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
