"""Shared vs isolated enrichment jobs end to end (issue 14): Kafka (Tansu) -> Spark -> MariaDB masters -> Parquet.

5 and 10 jobs over two topics (``orders``, ``clicks``: the payloads of
:mod:`ssbj.bench.shared_data`) and three master tables in MariaDB, each set run

* **isolated**: one :class:`~ssbj.pipeline.job.EnrichmentJob` per job, one after the
  other on the same Spark session (as separate applications would, each decoding its
  topic and scanning its master table, without their JVM start-up);
* **shared**: one :class:`~ssbj.pipeline.multijob.MultiJob` (``ssbj run --config ...``).

Same b and w in both (``master.partition_rows``, ``join.step_rows``), available-now
runs, Parquet sinks. Throughput = stream tuples of all jobs / wall time of the runs;
memory = the operators' structures at their ``nbytes``, peak per run (isolated: the
sum of the jobs' peaks, as if they ran side by side; shared: every epoch's groups plus
the stream store); master rows read from MariaDB; the ILP's solve time for the same job
files (``ssbj plan --config``). Every job's output of both modes is compared with
DuckDB's batch join of the produced records and the master table (multisets).

``python -m ssbj.bench.exp_shared_pipeline --out bench/shared`` adds ``pipeline`` to
``bench/shared/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import sqlalchemy as sa

from ssbj.bench import shared_data as es
from ssbj.config import JobConfig, parse_config
from ssbj.pipeline.job import EnrichmentJob, spark_session
from ssbj.pipeline.multijob import MultiJob
from ssbj.pipeline.shared_plan import plan_configs
from ssbj.testing.kafka import TansuBroker
from ssbj.testing.mariadb import PASSWORD, MariaDBServer, launch

PW_ENV = "SSBJ_BENCH_DB_PASSWORD"

# name, topic, master, stream key, master columns, join type (job files cannot filter: no filters here)
JOBS = [
    ("orders_customer", "orders", "customer", "o_cust", ["c_name", "c_segment"], "inner"),
    ("orders_product", "orders", "product", "o_prod", ["p_name", "p_price"], "inner"),
    ("orders_supplier", "orders", "supplier", "o_supp", ["s_name"], "inner"),
    ("clicks_customer", "clicks", "customer", "k_cust", ["c_nation"], "left"),
    ("clicks_product", "clicks", "product", "k_prod", ["p_brand"], "inner"),
    ("orders_customer_addr", "orders", "customer", "o_cust", ["c_address"], "left"),
    ("orders_product_brand", "orders", "product", "o_prod", ["p_brand"], "inner"),
    ("clicks_customer_name", "clicks", "customer", "k_cust", ["c_name"], "inner"),
    ("orders_customer_nation", "orders", "customer", "o_cust", ["c_nation"], "inner"),
    ("clicks_product_price", "clicks", "product", "k_prod", ["p_name", "p_price"], "left"),
]
TYPES = {pa.int64(): "int64", pa.float64(): "float64", pa.string(): "string"}
DDL = {
    "customer": "id BIGINT PRIMARY KEY, c_key BIGINT, c_name VARCHAR(40), c_segment VARCHAR(10), "
    "c_nation BIGINT, c_address VARCHAR(60)",
    "product": "id BIGINT PRIMARY KEY, p_key BIGINT, p_name VARCHAR(40), p_brand VARCHAR(20), p_price DOUBLE",
    "supplier": "id BIGINT PRIMARY KEY, s_key BIGINT, s_name VARCHAR(40), s_nation BIGINT",
}


def load_masters(server: MariaDBServer, scale: es.Scale, work: Path) -> dict[str, pa.Table]:
    """Generate the masters (exp_shared's data) and copy them into MariaDB; returns them as Arrow."""
    db = work / "masters.db"
    es.make_masters(db, scale, seed=1)
    eng = sa.create_engine(server.url)
    out = {}
    with sqlite3.connect(db) as src, eng.begin() as dst:
        for table, ddl in DDL.items():
            cur = src.execute(f"SELECT * FROM {table}")  # noqa: S608 - our own table names
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
            dst.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
            dst.execute(sa.text(f"CREATE TABLE {table} ({ddl})"))
            ins = sa.text(f"INSERT INTO {table} VALUES ({', '.join(':' + n for n in names)})")  # noqa: S608
            for i in range(0, len(rows), 20_000):
                dst.execute(ins, [dict(zip(names, r, strict=True)) for r in rows[i : i + 20_000]])
            out[table] = pa.table({n: [r[j] for r in rows] for j, n in enumerate(names)})
    eng.dispose()
    return out


def produce(broker: TansuBroker, scale: es.Scale) -> dict[str, pa.Table]:
    """Produce both topics (2 partitions each); returns the records as decoded by the reference."""
    streams = es.make_streams(scale, seed=2)
    out = {}
    for topic, payloads in streams.items():
        broker.create_topic(topic, 2)
        lines = [ln for p in payloads for ln in p.decode().splitlines() if ln]
        broker.produce(topic, lines)
        out[topic] = pa.concat_tables([es.decode(topic, p) for p in payloads])
    return out


def job_config(spec: tuple[str, str, str, str, list[str], str], mode: str, env: dict[str, Any]) -> JobConfig:
    """Return the job file of ``spec`` for one mode (its own sinks and checkpoint)."""
    name, topic, master, key, cols, how = spec
    mkey, _ = es.MASTERS[master]
    root = Path(env["work"]) / mode
    return parse_config(
        {
            "name": name,
            "source": {
                "kind": "kafka",
                "bootstrap_servers": env["bootstrap"],
                "topic": topic,
                "max_offsets_per_trigger": env["batch"],
            },
            "schema": {f.name: TYPES[f.type] for f in es.SCHEMAS[topic]},
            "master": {
                "url": env["url"],
                "password_env": PW_ENV,
                "table": master,
                "key": mkey,
                "columns": cols,
                "page_column": "id",
                "partition_rows": env["b"],
            },
            "join": {"stream_key": key, "type": how, "step_rows": env["w"]},
            "shared": {"disk_buffer": env["disk_buffer"]},  # read by the shared runs only
            "sink": {"kind": "parquet", "path": str(root / "out" / name)},
            "dead_letter": {"kind": "parquet", "path": str(root / "dead" / name)},
            "checkpoint": str(root / "ck" / name),
            "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}},
        },
        name,
    )


class _Rows:
    """Counts master rows read (the isolated jobs' observer)."""

    def __init__(self) -> None:
        self.rows = 0

    def on_step(self, result: Any) -> None:
        """Ignore steps."""

    def before_partition_read(self, partition: int) -> None:
        """Nothing to do before a read."""

    def after_partition_read(self, partition: int, rows: int, seconds: float) -> None:
        """Count the rows."""
        self.rows += rows


def run_isolated(cfgs: list[JobConfig], spark: Any) -> dict[str, Any]:
    """Run each job on its own, one after the other; seconds, the sum of memory peaks, master rows read."""
    peaks, rows, secs, each = {}, 0, 0.0, {}
    for cfg in cfgs:
        peak = [0]
        obs = _Rows()

        def track(p: dict[str, Any], peak: list[int] = peak) -> None:
            peak[0] = max(peak[0], int(p["memory"]["total"]))

        t0 = time.perf_counter()
        EnrichmentJob(cfg, spark=spark, on_progress=track, observer=obs).run()
        each[cfg.name] = time.perf_counter() - t0
        secs += each[cfg.name]
        peaks[cfg.name] = peak[0]
        rows += obs.rows
    return {
        "seconds": secs,
        "peak_memory_bytes": sum(peaks.values()),
        "per_job_peak": peaks,
        "master_rows_read": rows,
        "per_job_seconds": each,
    }


def run_shared(cfgs: list[JobConfig], spark: Any, ckpt: Path) -> dict[str, Any]:
    """Run the jobs as one shared application; seconds, memory peak, master rows read."""
    state: dict[str, Any] = {"peak": 0, "rows": 0, "at_peak": {}}

    def track(p: dict[str, Any]) -> None:
        if int(p["memory_bytes"]) > state["peak"]:
            state["peak"] = int(p["memory_bytes"])
            state["at_peak"] = p["memory"]  # per epoch: each scan group and the stream store
        state["rows"] = int(p["master_rows_read"])

    t0 = time.perf_counter()
    MultiJob(cfgs, ckpt, spark=spark, on_progress=track).run()
    return {
        "seconds": time.perf_counter() - t0,
        "peak_memory_bytes": state["peak"],
        "peak_memory_split": state["at_peak"],
        "master_rows_read": state["rows"],
    }


def exact(cfg: JobConfig, streams: dict[str, pa.Table], masters: dict[str, pa.Table]) -> bool:
    """Whether the job's Parquet output equals DuckDB's batch join (multisets, EXCEPT ALL both ways)."""
    spec = next(j for j in JOBS if j[0] == cfg.name)
    _, topic, master, key, cols, how = spec
    mkey, _ = es.MASTERS[master]
    db = duckdb.connect()
    db.register("s", streams[topic])
    db.register("m", masters[master])
    names = ", ".join([*streams[topic].column_names, *cols])
    join = "LEFT JOIN" if how == "left" else "JOIN"
    sel = ", ".join([*(f"s.{c}" for c in streams[topic].column_names), *(f"m.{c}" for c in cols)])
    db.execute(f"CREATE TABLE want AS SELECT {sel} FROM s {join} m ON s.{key} = m.{mkey}")  # noqa: S608
    out = Path(cfg.sink.path) / "*.parquet"  # type: ignore[union-attr]
    db.execute(f"CREATE TABLE got AS SELECT {names} FROM read_parquet('{out}')")  # noqa: S608
    diff = db.execute(
        "SELECT (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM got)) + "
        "(SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM want))"
    ).fetchone()
    return bool(diff is not None and diff[0] == 0)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; results into ``--out``/results.json under ``pipeline``."""
    ap = argparse.ArgumentParser(prog="python -m ssbj.bench.exp_shared_pipeline", description=__doc__)
    ap.add_argument("--tuples", type=int, default=60_000, help="records per topic")
    ap.add_argument("--batch", type=int, default=20_000, help="offsets per micro-batch")
    ap.add_argument("--w", type=int, default=10_000, help="stream tuples per step")
    ap.add_argument("--b", type=int, default=5_000, help="master rows per partition")
    ap.add_argument("--customers", type=int, default=50_000)
    ap.add_argument("--products", type=int, default=25_000)
    ap.add_argument("--suppliers", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, nargs="+", default=[5, 10])
    ap.add_argument("--reps", type=int, default=2, help="runs per mode, alternating which goes first")
    ap.add_argument("--out", default="bench/shared")
    ap.add_argument(
        "--disk-buffer",
        choices=("largest", "pooled"),
        default="largest",
        help="shared.disk_buffer of the shared runs; pooled writes pipeline_pooled (and *_pooled ratios)",
    )
    args = ap.parse_args(argv)
    scale = es.Scale(args.customers, args.products, args.suppliers, args.tuples, args.batch, args.b)
    os.environ[PW_ENV] = PASSWORD
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ssbj-shared-bench-") as tmp:
        work = Path(tmp)
        server = launch(work / "mariadb")
        broker = TansuBroker(work)
        broker.launch()
        try:
            masters = load_masters(server, scale, work)
            streams = produce(broker, scale)
            env = {
                "work": str(work),
                "bootstrap": broker.bootstrap,
                "batch": args.batch,
                "url": f"mysql+pymysql://ssbj@127.0.0.1:{server.port}/ssbj",
                "b": args.b,
                "w": args.w,
                "disk_buffer": args.disk_buffer,
            }
            spark = None
            sets = []
            for n in args.jobs:
                specs = JOBS[:n]
                if spark is None:
                    spark = spark_session(job_config(specs[0], "warm", env))
                    spark.sparkContext.setLogLevel("ERROR")
                    # warm-up, not measured: the first run of a session pays Spark's and the workers' start
                    print("warm-up ...", file=sys.stderr, flush=True)
                    run_shared([job_config(x, "warm", env) for x in specs], spark, work / "warm" / "app")
                runs: dict[str, list[dict[str, Any]]] = {"shared": [], "isolated": []}
                exact_all = {"shared": True, "isolated": True}
                for rep in range(args.reps):  # alternate the order: shared first, then isolated first
                    for mode in ("shared", "isolated") if rep % 2 == 0 else ("isolated", "shared"):
                        cfgs = [job_config(x, f"{mode}{n}-{rep}", env) for x in specs]
                        print(f"{n} jobs, run {rep}: {mode} ...", file=sys.stderr, flush=True)
                        if mode == "shared":
                            r = run_shared(cfgs, spark, work / f"{mode}{n}-{rep}" / "app")
                        else:
                            r = run_isolated(cfgs, spark)
                        runs[mode].append(r)
                        exact_all[mode] = exact_all[mode] and all(exact(c, streams, masters) for c in cfgs)
                paths = []
                for c in (job_config(x, "plan", env) for x in specs):
                    p = work / f"{c.name}.yaml"
                    p.write_text(json.dumps(c.model_dump(mode="json", by_alias=True)))
                    paths.append(str(p))
                run_plan, _, _ = plan_configs(paths, None, None, None)
                assert run_plan.sharing is not None  # noqa: S101
                plan = run_plan.sharing
                tuples = sum(streams[x[1]].num_rows for x in specs)

                def mean(mode: str, key: str, runs: dict[str, list[dict[str, Any]]] = runs) -> float:
                    return statistics.fmean(float(r[key]) for r in runs[mode])

                row = {
                    "jobs": n,
                    "stream_tuples_all_jobs": tuples,
                    "isolated": {
                        "seconds_mean": mean("isolated", "seconds"),
                        "throughput": tuples / mean("isolated", "seconds"),
                        "runs": runs["isolated"],
                    },
                    "shared": {
                        "seconds_mean": mean("shared", "seconds"),
                        "throughput": tuples / mean("shared", "seconds"),
                        "runs": runs["shared"],
                    },
                    "throughput_ratio": mean("isolated", "seconds") / mean("shared", "seconds"),
                    "memory_ratio": mean("isolated", "peak_memory_bytes") / max(mean("shared", "peak_memory_bytes"), 1),
                    "master_rows_ratio": mean("isolated", "master_rows_read")
                    / max(mean("shared", "master_rows_read"), 1),
                    "ilp_ms": (plan.solution.build_seconds + plan.solution.solve_seconds) * 1e3,
                    "exact": exact_all,
                }
                sets.append(row)
                print(
                    f"{n} jobs: isolated {row['isolated']['seconds_mean']:.1f} s, shared "
                    f"{row['shared']['seconds_mean']:.1f} s (means of {args.reps}) -> "
                    f"{row['throughput_ratio']:.2f}x throughput, memory {row['memory_ratio']:.2f}x less, "
                    f"master rows {row['master_rows_ratio']:.2f}x fewer, ILP {row['ilp_ms']:.1f} ms, "
                    f"exact {row['exact']}",
                    file=sys.stderr,
                    flush=True,
                )
            if spark is not None:
                spark.stop()
        finally:
            broker.close()
            server.stop()
    doc = {
        "command": "python -m ssbj.bench.exp_shared_pipeline " + " ".join(argv if argv is not None else sys.argv[1:]),
        "scale": {k: v for k, v in scale.__dict__.items() if k != "master"},  # masters: MariaDB
        "w": args.w,
        "disk_buffer": args.disk_buffer,
        "machine": f"{os.cpu_count()} cores, shared with other work (load not controlled)",
        "seconds_total": time.perf_counter() - t_all,
        "sets": sets,
    }
    out = Path(args.out) / "results.json"
    res = json.loads(out.read_text()) if out.exists() else {}
    suffix = "_pooled" if args.disk_buffer == "pooled" else ""
    res["pipeline" + suffix] = doc
    ratios = res.setdefault("ratios", {})
    for row in sets:
        ratios[f"pipeline_{row['jobs']}_jobs{suffix}"] = {
            "shared/isolated": {"throughput": row["throughput_ratio"], "memory": row["memory_ratio"]}
        }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
