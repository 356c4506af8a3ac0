"""Several enrichment jobs in one Spark application: one streaming query per distinct source.

Each source (topic or landing directory) is one Structured Streaming query with its own
Spark checkpoint (``<checkpoint>/spark/<source>``), so adding a job on a new source adds
a query without touching the others' offsets. Their ``foreachBatch`` calls hand the raw
records to one :class:`~ssbj.pipeline.multiprocessor.MultiProcessor` (serialised by its
lock; Spark reads the next batch of another source meanwhile), which decodes each batch
once, runs the shared operator for every job and writes each job's own sink, dead letters
and counts. ``available-now`` runs drain every waiting tuple once all queries have ended.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssbj.config import DatabaseSink, JobConfig
from ssbj.contracts import RunCounts
from ssbj.errors import ServiceError
from ssbj.pipeline import multiconf
from ssbj.pipeline.audit import Warehouse
from ssbj.pipeline.job import source_frame, spark_session
from ssbj.pipeline.multiprocessor import MultiProcessor
from ssbj.pipeline.restarts import RestartingJob
from ssbj.pipeline.streaming import ProgressCallback, publish_progress, start_foreach_batch

log = logging.getLogger("ssbj.job")


@dataclass
class MultiRunSummary:
    """What a shared run did, per job."""

    calls: int
    drained: bool
    counts: dict[str, RunCounts]
    restarts: int
    switched: bool


class MultiJob(RestartingJob):
    """Jobs of one application (:func:`ssbj.pipeline.multiconf.check`), run on shared scans."""

    def __init__(
        self,
        cfgs: list[JobConfig],
        checkpoint: str | Path,
        spark: Any | None = None,
        on_progress: ProgressCallback | None = None,
        max_restarts: int = 10,
        restart_backoff: float = 2.0,
        run_id: str | None = None,
    ) -> None:
        self.jobs = multiconf.check(cfgs)
        self.root = Path(checkpoint)
        self.spark = spark
        self.on_progress = on_progress
        super().__init__(max_restarts, restart_backoff)
        self.run_id = run_id
        self.processor = MultiProcessor(self.jobs, self.root)
        self._calls = 0
        self._last_call = time.monotonic()
        self.queries: list[Any] = []

    def _foreach(self, sid: str) -> Callable[[Any, int], None]:
        def handle(df: Any, batch_id: int) -> None:
            try:
                raw = df.toArrow()  # outside the lock: another source's batch may be joining meanwhile
                progress = self.processor.process(sid, int(batch_id), lambda: raw)
                self._calls += 1
                self._last_call = time.monotonic()
                if progress is not None:
                    self._publish(progress)
            except BaseException as exc:
                self._error = exc
                raise

        return handle

    def _publish(self, progress: dict[str, Any]) -> None:
        publish_progress(self.root / "last_progress.json", progress, self.on_progress)

    def _start(self) -> list[Any]:
        assert self.spark is not None  # noqa: S101
        trig = self.jobs.first.trigger
        out = []
        for sid, names in self.jobs.sources.items():
            cfg = self.jobs.jobs[names[0]]
            d = multiconf.source_dir(sid)
            frame = source_frame(self.spark, cfg)
            out.append(
                start_foreach_batch(frame, self._foreach(sid), self.root / "spark" / d, f"ssbj-shared-{d}", trig)
            )
        return out

    def run(self) -> MultiRunSummary:
        """Run until every source is exhausted (available-now) or :meth:`stop` is called."""
        if self.spark is None:
            self.spark = spark_session(self.jobs.first)
        self.root.mkdir(parents=True, exist_ok=True)
        self.processor.open()
        t_start = time.monotonic()
        before = self.processor.counts()
        warehouses = self._begin_audit()

        def attempt() -> None:
            self._error = None
            self.queries = []
            self.queries = self._start()
            self._wait()
            failed = [q.exception() for q in self.queries if q.exception() is not None]
            if self._error is not None or failed:
                raise ServiceError(f"a Spark query failed: {failed[0] if failed else self._error}")

        restarts = self._run_restarting(attempt, self._stop_queries, self.processor.reset, log)
        drained = False
        if self.jobs.first.trigger.mode == "available-now" and not self.stop_event.is_set():
            p = self.processor.drain()
            drained = True
            if p is not None:
                self._publish(p)
        after = self.processor.counts()
        self._finish_audit(warehouses, before, after, time.monotonic() - t_start)
        return MultiRunSummary(self._calls, drained, after, restarts, self.processor.switched)

    def _begin_audit(self) -> dict[str, Warehouse]:
        out: dict[str, Warehouse] = {}
        if self.run_id is None:
            return out
        # removed jobs whose old epoch still drains write their last rows in this run: they get a row too
        for n, cfg in {**self.processor.known, **self.jobs.jobs}.items():
            if isinstance(cfg.sink, DatabaseSink):
                wh = Warehouse(cfg)
                wh.begin_run(self.run_id, self.processor.position())
                out[n] = wh
            else:
                log.warning("job %s writes Parquet: no audit row (the audit table lives in a sink database)", n)
        return out

    def _finish_audit(
        self, warehouses: dict[str, Warehouse], before: dict[str, RunCounts], after: dict[str, RunCounts], secs: float
    ) -> None:
        assert self.run_id is not None or not warehouses  # noqa: S101
        for n, wh in warehouses.items():
            delta = after[n].minus(before.get(n, RunCounts()))
            wh.finish_run(str(self.run_id), self.processor.position(), delta, secs)

    def _wait(self) -> None:
        idle = self.jobs.first.trigger.idle_drain_seconds
        processing = self.jobs.first.trigger.mode == "processing-time"
        while not self.stop_event.is_set():
            if self._error is not None or any(q.exception() is not None for q in self.queries if not q.isActive):
                return
            if all(q.awaitTermination(0.5 / len(self.queries)) for q in self.queries):
                return
            if processing and idle > 0 and time.monotonic() - self._last_call > idle:
                p = self.processor.drain()
                self._last_call = time.monotonic()
                if p is not None:
                    self._publish(p)
        self._stop_queries()

    def _stop_queries(self) -> None:
        for q in self.queries:
            if q.isActive:
                q.stop()
