"""``ssbj_exec``: the ssbj job with its join in the executors (``join.placement: executors``, P shards).

The shards' operators run in Spark's Python workers, out of reach of the driver-side seams
:mod:`.m_ssbj` measures through; everything here comes from the job's progress records
(one per micro-batch, with every shard's phase seconds, task start and worker pid), the
database's status counters and the warehouse. The timeline has one lane per shard and
phase (placed back to back, ending when the shard's task ended) and one for the Spark
work outside the shards' tasks (stage 1's decode and routing, the shuffle, scheduling).
"""

from __future__ import annotations

import time

from ssbj.bench.pipeline.harness import Harness, MethodResult
from ssbj.bench.pipeline.measure import DbCounters
from ssbj.bench.pipeline.spec import Json
from ssbj.config import parse_config
from ssbj.contracts import shard_segment
from ssbj.pipeline.job import EnrichmentJob

PHASES = ("input", "restore", "read", "decode", "join", "write", "checkpoint")


class ExecutorMethod:
    """The ssbj job, sharded in the executors; ``exchange`` is the job's ``join.exchange``."""

    def __init__(self, name: str, label: str, exchange: str) -> None:
        self.name = name
        self.label = label
        self.exchange = exchange

    def supports_shards(self, shards: int) -> str | None:
        """Any P."""
        return None

    def run(self, h: Harness) -> MethodResult:
        """Run the job over the whole topic into a fresh warehouse table."""
        table = f"wh_{self.name}"
        h.fresh(table, f"{table}_dead")
        res = MethodResult(self.name, self.label)
        st = h.staleness()
        progress: list[Json] = []
        tl = h.timeline()
        offset = time.time() - time.perf_counter()  # executors report wall-clock times

        def on_progress(p: Json) -> None:
            progress.append(p)
            now = time.monotonic()
            for s in p["per_shard"]:
                st.batch_done[(int(p["batch_id"]), shard_segment(int(p["segment"]), int(s["shard"])))] = now
                end = float(s["task_started"]) + float(s["task_seconds"]) - offset
                if "seconds" in s:
                    tl.add_phases(
                        {f"shard {s['shard']} {k}": v for k, v in s["seconds"].items()},
                        [f"shard {s['shard']} {k}" for k in PHASES],
                        end,
                    )
                tl.add(f"shard {s['shard']} task", end - float(s["task_seconds"]), end)
            first_task = min((float(s["task_started"]) for s in p["per_shard"]), default=None)
            if p.get("stage1_started") and first_task is not None:  # source tasks until the shuffle is read
                tl.add("stage 1 (source read, decode)", float(p["stage1_started"]) - offset, first_task - offset)
            tl.add(
                "spark (driver wall per batch)", time.perf_counter() - float(p["seconds"]["wall"]), time.perf_counter()
            )
            if p["event"] == "batch":
                st.maybe_update(h.db, int(p["totals"]["records_in"]), int(p["batch_id"]))

        doc = h.job_config("ssbj", table)
        doc["join"].update({"placement": "executors", "shards": h.shards, "exchange": self.exchange})
        cfg = parse_config(doc, "bench ssbj_exec")
        before = h.counters.snapshot()
        with h.rss() as rss:
            t0 = time.perf_counter()
            job = EnrichmentJob(cfg, spark=h.spark, on_progress=on_progress)
            t1 = time.perf_counter()
            tl.start()
            summary = job.run()
            tl.stop()
            t2 = time.perf_counter()
        after = h.counters.snapshot()
        res.tuples = summary.counts.records_in
        res.setup_seconds = t1 - t0
        res.wall_seconds = t2 - t1
        res.tuples_per_second = res.tuples / res.wall_seconds
        busy = sum(max((s.get("seconds", {}).get("join", 0.0) for s in p["per_shard"]), default=0.0) for p in progress)
        completed = sum(int(p["completed_tuples"]) for p in progress)
        res.join_service_rate = completed / busy if busy else 0.0
        phases: dict[str, float] = {
            k: sum(float(p["seconds"].get(src, 0.0)) for p in progress)
            for k, src in (
                ("driver_wall_per_batch", "wall"),
                ("stage1_read", "stage1_read"),
                ("stage1_decode", "stage1_decode"),
            )
        }
        for p in progress:
            for s in p["per_shard"]:
                for k, v in s.get("seconds", {}).items():
                    phases[f"shard_{k}"] = phases.get(f"shard_{k}", 0.0) + float(v)
                phases["shard_task"] = phases.get("shard_task", 0.0) + float(s["task_seconds"])
        res.phase_seconds = phases
        res.timeline = tl.result()
        peaks = [float(p["memory"].get("total", 0.0)) for p in progress]
        res.memory = {
            "budget_bytes": cfg.join.memory,
            "operator_peak_bytes_all_shards": max(peaks, default=None),
            **rss.result(),
        }
        res.db = DbCounters.report(before, after, res.tuples)
        residency = [s["resident"] for p in progress for s in p["per_shard"]]
        res.details = {
            "batches": summary.batches,
            "restarts": summary.restarts,
            "counts": summary.counts.to_dict(),
            "shards": h.shards,
            "resident_share": sum(residency) / len(residency) if residency else None,
            "worker_pids": sorted({int(s["pid"]) for p in progress for s in p["per_shard"]}),
            "exchange": self.exchange,
        }
        res.correctness = h.check(table, res.tuples, dead_table=f"{table}_dead")
        res.staleness = h.stale_report(table, st, None)
        return res


METHOD = ExecutorMethod("ssbj_exec", "SSBJ in the executors (P shards, shuffle exchange)", "shuffle")
