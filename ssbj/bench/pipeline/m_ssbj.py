"""``ssbj``: the ssbj job (config dict -> :func:`ssbj.config.parse_config` -> :class:`EnrichmentJob`).

Trigger available-now, warehouse sink = a MariaDB table, the run's memory budget.  The job is
watched through its seams only: ``on_progress`` records and a :class:`StepObserver`.
:class:`JobMethod` also runs ``meshjoin`` (:mod:`.m_meshjoin`), the same job with the other algorithm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ssbj.bench.pipeline.harness import Harness, MethodResult, Unsupported
from ssbj.bench.pipeline.measure import DbCounters, PartitionReadCounter, StepRecorder
from ssbj.bench.pipeline.spec import Json
from ssbj.config import parse_config
from ssbj.pipeline.job import EnrichmentJob
from ssbj.pipeline.observe import FanOut
from ssbj.pipeline.processor import EnrichmentProcessor

# P > 1 is the executor placement (join.placement: executors): its operators run in Spark's Python
# workers, out of reach of the driver-side seams this module measures through, so it is :mod:`.m_ssbj_exec`.
SHARDED = "P > 1 runs the join in the executors: method ssbj_exec"


class JobMethod:
    """The ssbj job with one algorithm."""

    def __init__(
        self,
        algorithm: str,
        label: str,
        name: str | None = None,
        join: Json | Callable[[Harness], Json] | None = None,
    ) -> None:
        self.name = name or algorithm
        self.algorithm = algorithm
        self.label = label
        self.join = join or {}  # settings beyond the harness's (join.hybrid of ssbj_index), or made from the run

    def supports_shards(self, shards: int) -> str | None:
        """P = 1: one operator on the driver."""
        return None if shards == 1 else SHARDED

    def run(self, h: Harness) -> MethodResult:
        """Run the job over the whole topic into a fresh warehouse table."""
        why = self.supports_shards(h.shards)
        if why is not None:
            raise Unsupported(why)
        table = f"wh_{self.name}"
        h.fresh(table, f"{table}_dead")
        res = MethodResult(self.name, self.label)
        st = h.staleness()
        progress: list[Json] = []
        counters = h.counters
        startup: dict[str, Any] = {}
        tl = h.timeline()

        def first_read() -> None:
            startup["at_first_partition_read"] = counters.snapshot()

        def on_progress(p: Json) -> None:
            tl.on_progress(p)
            progress.append(p)
            st.batch_done[(int(p["batch_id"]), int(p["segment"]))] = time.monotonic()
            if p["event"] == "batch":
                st.maybe_update(h.db, int(p["totals"]["records_in"]), int(p["batch_id"]))

        conf = h.job_config(self.algorithm, table)
        conf["join"].update(self.join(h) if callable(self.join) else self.join)
        cfg = parse_config(conf, f"bench {self.name}")
        before = counters.snapshot()
        reads, steps = PartitionReadCounter(first_read), StepRecorder(st, h.case.row_id)
        with h.rss() as rss:
            t0 = time.perf_counter()
            job = EnrichmentJob(cfg, spark=h.spark, on_progress=on_progress, observer=FanOut(reads, steps, tl))
            t1 = time.perf_counter()
            tl.start()
            summary = job.run()
            tl.stop()
            t2 = time.perf_counter()
        after = counters.snapshot()
        if not isinstance(job.processor, EnrichmentProcessor):
            raise Unsupported("the executor placement has its own method module")
        op = job.processor.op
        if op is None:
            raise RuntimeError("the job ran no operator")
        totals = op.totals()
        master = job.processor.master
        res.tuples = summary.counts.records_in
        res.setup_seconds = t1 - t0
        res.wall_seconds = t2 - t1
        res.tuples_per_second = res.tuples / res.wall_seconds
        res.join_service_rate = float(totals.service_rate)
        phases: dict[str, float] = {}
        for p in progress:
            for k, v in p["seconds"].items():
                phases[k] = phases.get(k, 0.0) + float(v)
        phases["operator_busy"] = float(totals.busy_seconds)
        phases["master_partition_reads"] = reads.seconds
        res.phase_seconds = phases
        res.timeline = tl.result()
        mem_totals = [int(p["memory"]["total"]) for p in progress]
        mem_with_buf = [int(p["memory"]["total"]) + int(p["memory"]["stream_buffer"]) for p in progress]
        peak_i = int(np.argmax(mem_totals)) if mem_totals else None
        res.memory = {
            "budget_bytes": cfg.join.memory,
            "operator_peak_bytes": max(mem_totals) if mem_totals else None,
            "operator_peak_with_stream_buffer_bytes": max(mem_with_buf) if mem_with_buf else None,
            "operator_peak_components": progress[peak_i]["memory"] if peak_i is not None else None,
            "operator_peak_bytes_over_steps": steps.mem_peak,
            "operator_peak_components_over_steps": steps.mem_peak_components,
            **rss.result(),
        }
        res.db = DbCounters.report(before, after, res.tuples)
        if "at_first_partition_read" in startup:
            sd = DbCounters.delta(before, startup["at_first_partition_read"])
            res.db["startup_com_select"] = sd["Com_select"]
            res.db["startup_rows_read"] = sd["Rows_read"]
        res.db["partitions_read"] = reads.calls
        res.db["master_rows_read_by_partitions"] = reads.rows
        res.details = {
            "batches": summary.batches,
            "restarts": summary.restarts,
            "counts": summary.counts.to_dict(),
            "partition_rows_b": master.partition_rows if master is not None else None,
            "partitions_k": master.num_partitions() if master is not None else None,
            "r_cycles": int(totals.r_cycles),
            "steps": int(totals.steps),
            "cache_share": float(totals["cache_share"]),
            "served_by_cache": int(totals["served_by_cache"]),
            "served_by_disk": int(totals["served_by_disk"]),
            "served_by_lookup": int(totals["served_by_lookup"]),
            "operator_counters": {k: int(v) for k, v in op._c.extra.items()},
            "chunk_bytes": op.chunk_bytes,
            "shards": h.shards,
        }
        res.correctness = h.check(table, res.tuples, dead_table=f"{table}_dead")
        per_step = steps.result()
        exact = {
            "tuples": per_step["stale_window_tuples"],
            "seconds": per_step["stale_window_seconds"],
            "how": "operator steps: tuples the steps read from the update to the step that emitted the last stale row",
        }
        res.staleness = h.stale_report(table, st, exact)
        if res.staleness.get("measured"):
            res.staleness["per_step"] = per_step
        return res


METHOD = JobMethod("ssbj", "SSBJ (ssbj job)")
