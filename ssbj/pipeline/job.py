"""The Spark Structured Streaming job: source -> foreachBatch(EnrichmentProcessor) -> sinks."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ssbj.config import AnyJobConfig, FileSource, JobConfig, KafkaSource, MultiWayJobConfig
from ssbj.config_cq import CqJobConfig
from ssbj.contracts import RunCounts
from ssbj.core.checkpoint import DirectoryStore
from ssbj.errors import ConfigError, ServiceError
from ssbj.pipeline import factory
from ssbj.pipeline.audit import Warehouse
from ssbj.pipeline.multiway_job import MultiWayProcessor, build_multiway_processor
from ssbj.pipeline.multiway_masters import STREAM_TAG
from ssbj.pipeline.observe import StepObserver
from ssbj.pipeline.processor import EnrichmentProcessor
from ssbj.pipeline.records import decoder
from ssbj.pipeline.restarts import RestartingJob
from ssbj.pipeline.shardedrun import ShardedRun
from ssbj.pipeline.streaming import ProgressCallback, publish_progress, start_foreach_batch

log = logging.getLogger("ssbj.job")


@dataclass
class RunSummary:
    """What a run did, and the counts that reconcile."""

    batches: int
    drained: bool
    counts: RunCounts
    last_progress: dict[str, Any]
    restarts: int


def spark_session(cfg: AnyJobConfig | CqJobConfig) -> Any:
    """Get or create the Spark session; under spark-submit its master wins over the config."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(cfg.name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        builder = builder.master(cfg.spark.master)
    builder = builder.config("spark.sql.execution.arrow.pyspark.enabled", "true")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for k, v in cfg.spark.conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


_RAW_COLUMNS = {  # every raw column of either source kind, for the union of two streams' sources
    "path": "STRING",
    "content": "BINARY",
    "value": "BINARY",
    "topic": "STRING",
    "partition": "INT",
    "offset": "BIGINT",
}


def source_frame(spark: Any, cfg: AnyJobConfig) -> Any:
    """Return the streaming DataFrame of raw records for the configured source(s).

    A multi-way job with a second stream reads both sources in one query: the union of the
    two, each record tagged with its stream's name (``ssbj_stream``), so one micro-batch,
    one Spark checkpoint (each source's offsets in it) and one operator checkpoint cover both.
    """
    if isinstance(cfg, MultiWayJobConfig) and cfg.second_stream is not None:
        frames = []
        for st, src in cfg.streams():
            f = _one_source(spark, src)
            cols = [f"'{st.name}' AS {STREAM_TAG}"]  # a validated identifier
            cols += [f"`{c}`" if c in f.columns else f"CAST(NULL AS {t}) AS `{c}`" for c, t in _RAW_COLUMNS.items()]
            frames.append(f.selectExpr(*cols))
        return frames[0].unionByName(frames[1])
    if isinstance(cfg, JobConfig) and cfg.join.placement == "executors" and cfg.join.exchange == "read":
        return kafka_reader(spark, cast(KafkaSource, cfg.source), ranges=True)  # the shards read the records
    return _one_source(spark, cfg.source)


def _one_source(spark: Any, src: FileSource | KafkaSource) -> Any:
    """Return the streaming DataFrame of raw records of one source."""
    if src.kind == "files":
        return files_reader(spark, src.path, src.max_files_per_trigger, src.glob, "source.path").select(
            "path", "content"
        )
    return kafka_reader(spark, src).select("value", "topic", "partition", "offset")


def files_reader(spark: Any, path: str, max_files: int, glob: str | None, field: str) -> Any:
    """Return the stream of files landing in directory ``path`` (columns path, content, ...)."""
    if not Path(path).is_dir():
        raise ConfigError(f"{field} {path!r} is not a directory")
    reader = (
        spark.readStream.format("binaryFile")
        .schema("path STRING, modificationTime TIMESTAMP, length BIGINT, content BINARY")
        .option("maxFilesPerTrigger", max_files)
    )
    if glob:
        reader = reader.option("pathGlobFilter", glob)
    return reader.load(path)


def kafka_reader(spark: Any, src: KafkaSource, ranges: bool = False) -> Any:
    """Return the stream of a Kafka topic's records (value, topic, partition, offset, ...); or its offset ranges."""
    if src.reader == "python":
        from ssbj.adapters.kafka_source import KafkaDataSource  # optional extra: imports pyspark

        spark.dataSource.register(KafkaDataSource)
        fmt = KafkaDataSource.name()
    else:
        fmt = "kafka"
    reader = spark.readStream.format(fmt)
    for k, v in factory.kafka_reader_options(src).items():
        reader = reader.option(k, v)
    if ranges:
        reader = reader.option("emit", "ranges")
    return reader.load()


class EnrichmentJob(RestartingJob):
    """One configured job: builds the processor, runs the streaming query, drains, restarts on outages."""

    def __init__(
        self,
        cfg: AnyJobConfig,
        spark: Any | None = None,
        on_progress: ProgressCallback | None = None,
        max_restarts: int = 10,
        restart_backoff: float = 2.0,
        run_id: str | None = None,
        observer: StepObserver | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_id = run_id
        self.spark = spark
        self.on_progress = on_progress
        super().__init__(max_restarts, restart_backoff)
        self.restart_backoff = restart_backoff
        self.processor: EnrichmentProcessor | ShardedRun | MultiWayProcessor
        if isinstance(cfg, MultiWayJobConfig):  # a SQL query over the stream and several masters
            self.processor = build_multiway_processor(cfg, DirectoryStore(cfg.operator_checkpoint))
            q = self.processor.query
            self._decode: Callable[[Any], Any] = q.stream_decoder() if cfg.second_stream is not None else q.decoder()
        else:
            if cfg.join.placement == "executors":
                self.processor = ShardedRun(cfg)  # the join runs in the executors; the driver holds no join state
            else:
                self.processor = factory.build_processor(cfg, DirectoryStore(cfg.operator_checkpoint), observer)
            self._decode = decoder(cfg)
        self._batches = 0
        self._last_batch_time = time.monotonic()
        self.query: Any = None

    def _committed(self, batch_id: int) -> bool:
        return (Path(self.cfg.spark_checkpoint) / "commits" / str(batch_id)).exists()

    def _foreach_batch(self, df: Any, batch_id: int) -> None:
        try:
            if isinstance(self.processor, ShardedRun):
                progress = self.processor.process_frame(df, int(batch_id))
            else:
                raw = df.toArrow()
                progress = self.processor.process(int(batch_id), lambda: self._decode(raw))
            self._batches += 1
            self._last_batch_time = time.monotonic()
            self._publish(progress)
        except BaseException as exc:
            self._error = exc
            raise

    def _publish(self, progress: dict[str, Any]) -> None:
        """Hand a progress record to the callback and to ``<checkpoint>/last_progress.json``."""
        publish_progress(Path(self.cfg.checkpoint) / "last_progress.json", progress, self.on_progress)

    def _start(self) -> Any:
        assert self.spark is not None  # noqa: S101
        frame = source_frame(self.spark, self.cfg)
        return start_foreach_batch(
            frame, self._foreach_batch, self.cfg.spark_checkpoint, f"ssbj-{self.cfg.name}", self.cfg.trigger
        )

    def run(self) -> RunSummary:
        """Run until the input is exhausted (available-now) or :meth:`stop` is called."""
        if self.spark is None:
            self.spark = spark_session(self.cfg)
        Path(self.cfg.checkpoint).mkdir(parents=True, exist_ok=True)
        if isinstance(self.processor, ShardedRun):
            self.processor.spark = self.spark
        self.processor.open()
        t_start = time.monotonic()
        warehouse = None
        before = self.processor.counts()
        if self.run_id is not None:
            warehouse = Warehouse(self.cfg)
            warehouse.begin_run(self.run_id, self.processor.position())

        def attempt() -> None:
            self._error = None
            self.query = self._start()
            self._wait()
            if self._error is not None or self.query.exception() is not None:
                raise ServiceError(f"the Spark query failed: {self.query.exception()}")

        restarts = self._run_restarting(attempt, self._stop_query, self.processor.reset, log)
        drained = False
        if self.cfg.trigger.mode == "available-now" and not self.stop_event.is_set():
            p = self.processor.drain(self._committed)
            drained = True
            if p is not None:
                self._publish(p)
        after = self.processor.counts()
        if warehouse is not None and self.run_id is not None:
            delta = after.minus(before)
            warehouse.finish_run(self.run_id, self.processor.position(), delta, time.monotonic() - t_start)
        return RunSummary(self._batches, drained, after, self.processor.last_progress, restarts)

    def _wait(self) -> None:
        q = self.query
        idle = self.cfg.trigger.idle_drain_seconds
        while not self.stop_event.is_set():
            if q.awaitTermination(0.5):
                return
            if (
                self.cfg.trigger.mode == "processing-time"
                and idle > 0
                and time.monotonic() - self._last_batch_time > idle
            ):
                p = self.processor.drain(self._committed)
                self._last_batch_time = time.monotonic()
                if p is not None:
                    self._publish(p)
        self._stop_query()

    def _stop_query(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()
