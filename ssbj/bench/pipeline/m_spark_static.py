"""``spark_static``: Spark stream-static join.

``foreachBatch`` re-reads the whole master table through Spark JDBC (MariaDB Connector/J on a
``jdbc:mysql://`` URL), broadcast-joins it with the micro-batch, and appends through JDBC.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ssbj.bench.pipeline.harness import Harness, MethodResult, Unsupported
from ssbj.bench.pipeline.measure import DbCounters
from ssbj.bench.pipeline.spec import JDBC_DRIVER
from ssbj.config import parse_config
from ssbj.pipeline.job import source_frame

SPARK_TYPES = {"int64": "BIGINT", "float64": "DOUBLE", "timestamp": "TIMESTAMP"}


class SparkStatic:
    """Spark's own stream-static join, R re-read per micro-batch."""

    name = "spark_static"
    label = "Spark stream-static join (JDBC re-read per batch, broadcast)"

    def supports_shards(self, shards: int) -> str | None:
        """Spark parallelises the join itself; P does not apply."""
        return None if shards == 1 else "Spark's broadcast join has no P of its own"

    def run(self, h: Harness) -> MethodResult:
        """Run the stream-static join over the whole topic."""
        from pyspark.sql import functions as F

        why = self.supports_shards(h.shards)
        if why is not None:
            raise Unsupported(why)
        case = h.case
        table = f"wh_{self.name}"
        ck = h.fresh(table)
        res = MethodResult(self.name, self.label)
        cfg = parse_config(h.job_config("ssbj", table), f"bench {self.name}")
        db = h.db
        props = {"user": db.user_name, "password": db.password, "driver": JDBC_DRIVER}
        m = h.scale.master_rows
        spark = h.spark

        def read_master() -> Any:
            return (
                spark.read.format("jdbc")
                .option("url", db.jdbc_url)
                .option("dbtable", "customer")
                .option("partitionColumn", "c_custkey")
                .option("lowerBound", "1")
                .option("upperBound", str(m + 1))
                .option("numPartitions", "2")
                .option("fetchsize", "10000")
                .options(**props)
                .load()
            )

        # the JDBC connection is checked once, outside the measured run: a wrong URL scheme or
        # dialect can return wrong rows without an error
        t0 = time.perf_counter()
        check = read_master().agg(F.count("*").alias("n"), F.sum("c_balance").alias("b")).collect()[0]
        if int(check["n"]) != m or not math.isclose(float(check["b"]), float(h.data.balance.sum()), rel_tol=1e-9):
            raise RuntimeError(f"Spark JDBC read of customer returned {check['n']} rows (expected {m}) or wrong sums")
        stream_schema = ", ".join(f"{n} {SPARK_TYPES[t]}" for n, t in case.stream_schema)
        st = h.staleness()
        state = {"consumed": 0, "batches": 0}
        holder: dict[str, Any] = {}
        write_url = db.jdbc_url + "?rewriteBatchedStatements=true"
        tl = h.timeline()

        def foreach(df: Any, batch_id: int) -> None:
            ta = time.perf_counter()
            q = holder.get("query")
            if q is not None:
                state["consumed"] = sum(int(p.numInputRows) for p in q.recentProgress)
            st.maybe_update(db, state["consumed"], batch_id - 1)
            master = read_master()
            orders = df.select(F.from_json(F.col("value").cast("string"), stream_schema).alias("o")).select("o.*")
            out = (
                orders.join(F.broadcast(master), orders[case.stream_key] == master[case.master_key], "inner")
                .select(*case.out_columns)
                .withColumn("ssbj_batch_id", F.lit(batch_id).cast("bigint"))
                .withColumn("ssbj_segment", F.lit(0))
            )
            out.write.format("jdbc").option("url", write_url).option("dbtable", table).option(
                "batchsize", "5000"
            ).options(**props).mode("append").save()
            state["batches"] += 1
            st.batch_done[(batch_id, 0)] = time.monotonic()
            tl.add("batch", ta, time.perf_counter())  # read R, join, write: one Spark job, not separable

        before = h.counters.snapshot()
        with h.rss() as rss:
            t1 = time.perf_counter()
            tl.start()
            query = (
                source_frame(spark, cfg)
                .writeStream.foreachBatch(foreach)
                .option("checkpointLocation", str(ck))
                .trigger(availableNow=True)
                .start()
            )
            holder["query"] = query
            h.await_query(query, self.name, lambda: sum(int(p.numInputRows) for p in query.recentProgress))
            tl.stop()
            t2 = time.perf_counter()
        after = h.counters.snapshot()
        if query.exception() is not None:
            raise RuntimeError(f"{self.name}: {query.exception()}")
        res.tuples = sum(int(p.numInputRows) for p in query.recentProgress)
        res.setup_seconds = t1 - t0
        res.wall_seconds = t2 - t1
        res.tuples_per_second = res.tuples / res.wall_seconds
        res.timeline = tl.result()
        res.memory = {
            "budget_bytes": None,
            "operator_peak_bytes": int(m * h.data.master_row_bytes),
            "note": "holds all of R (broadcast) per micro-batch; operator_peak_bytes = |R| x Arrow row size",
            **rss.result(),
        }
        res.db = DbCounters.report(before, after, res.tuples)
        res.details = {"batches": state["batches"], "jdbc_url": db.jdbc_url, "jdbc_driver": JDBC_DRIVER}
        res.correctness = h.check(table, res.tuples)
        res.staleness = h.stale_report(table, st)
        return res


METHOD = SparkStatic()
