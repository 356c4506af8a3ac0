"""A continuous query in Spark Structured Streaming: change streams -> foreachBatch(CqProcessor) -> warehouse.

Every relation's change source (a Kafka topic of Debezium envelopes, or a landing
directory of change files) is one streaming DataFrame with the columns of
:data:`ssbj.pipeline.cq_records.RAW_COLUMNS`; their union is one streaming query, so one
micro-batch id covers the records of all relations, and Spark's checkpoint holds every
source's offsets.  The driver applies each micro-batch to the engine
(:class:`~ssbj.pipeline.cq_processor.CqProcessor`), which writes idempotently and
checkpoints under the batch id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ssbj.adapters.result_table import ParquetResultFile, ResultTarget, SqlResultTable
from ssbj.config import DatabaseSink, KafkaSource, ParquetSink
from ssbj.config_cq import CqJobConfig, FileChanges
from ssbj.contracts import TableName
from ssbj.core.checkpoint import DirectoryStore
from ssbj.credentials import engine, kafka_bootstrap, kafka_client_options
from ssbj.errors import ConfigError, DependencyError, ServiceError, StateError, TransientError
from ssbj.pipeline.cq_processor import CqProcessor, CqTotals
from ssbj.pipeline.cq_records import DecodedChanges, decode_batch, snapshot_changes
from ssbj.pipeline.factory import build_sink
from ssbj.pipeline.job import files_reader, kafka_reader, spark_session
from ssbj.pipeline.restarts import RestartingJob
from ssbj.pipeline.streaming import ProgressCallback, publish_progress, start_foreach_batch

log = logging.getLogger("ssbj.cq.job")


@dataclass
class CqRunSummary:
    """What a run did."""

    batches: int
    totals: CqTotals
    last_progress: dict[str, Any]
    restarts: int


def _file_frame(spark: Any, relation: str, src: FileChanges) -> Any:
    from pyspark.sql import functions as F

    frame = files_reader(spark, src.path, src.max_files_per_trigger, src.glob, f"sources.{relation}.path")
    return frame.select(
        F.lit(relation).alias("relation"),
        F.col("content").alias("value"),
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.lit(None).cast("long").alias("offset"),
        F.col("path"),
    )


def _kafka_frame(spark: Any, relation: str, src: KafkaSource) -> Any:
    from pyspark.sql import functions as F

    return kafka_reader(spark, src).select(
        F.lit(relation).alias("relation"),
        F.col("value").cast("binary"),
        F.col("topic"),
        F.col("partition").cast("int"),
        F.col("offset").cast("long"),
        F.lit(None).cast("string").alias("path"),
    )


def source_frame(spark: Any, cfg: CqJobConfig) -> Any:
    """Return the union of every relation's change stream."""
    frames = [
        _file_frame(spark, rel, src) if isinstance(src, FileChanges) else _kafka_frame(spark, rel, src)
        for rel, src in cfg.sources.items()
    ]
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def _result_target(sink: DatabaseSink | ParquetSink) -> ResultTarget:
    if isinstance(sink, ParquetSink):
        return ParquetResultFile(sink.path)
    return SqlResultTable(engine(sink), sink.table, create=sink.create)


def read_snapshot(cfg: CqJobConfig) -> Callable[[DecodedChanges], None] | None:
    """Return the job's snapshot reader (None without a snapshot): every row of each relation as an insert."""
    snap = cfg.snapshot
    if snap is None:
        return None
    plan = cfg.plan

    def read(out: DecodedChanges) -> None:
        eng = engine(snap)
        for relation in snap.relations:
            spec = plan.tables[relation]
            name = TableName.parse(snap.table_of(relation))
            try:
                with eng.connect() as conn:
                    t = sa.Table(name.name, sa.MetaData(), schema=name.schema, autoload_with=conn)
                    cols = {c.name.lower(): c for c in t.columns}
                    missing = [c for c in spec.columns if c not in cols]
                    if missing:
                        raise ConfigError(f"snapshot table {name} lacks column(s) {missing} of relation {relation}")
                    rows = [tuple(r) for r in conn.execute(sa.select(*(cols[c] for c in spec.columns)))]
            except sa.exc.SQLAlchemyError as exc:
                raise TransientError(
                    f"snapshot: cannot read {name} at {snap.display()}: {type(exc).__name__}"
                ) from None
            snapshot_changes(out, relation, spec, str(name), rows)
        log.info("snapshot of %s read: %d rows", ", ".join(snap.relations), out.records)

    return read


def build_processor(cfg: CqJobConfig) -> CqProcessor:
    """Return the processor with its sinks (connections are opened here)."""
    t = cfg.target
    return CqProcessor(
        cfg.plan,
        DirectoryStore(cfg.engine_checkpoint),
        build_sink(t.dead_letter),
        result=_result_target(t.result) if t.result is not None else None,
        deltas=build_sink(t.deltas) if t.deltas is not None else None,
        snapshot=read_snapshot(cfg),
        full_every=cfg.full_checkpoint_every,
    )


class CqJob(RestartingJob):
    """One continuous-query job: the streaming query, its restarts after outages, and its counts."""

    def __init__(
        self,
        cfg: CqJobConfig,
        spark: Any | None = None,
        on_progress: ProgressCallback | None = None,
        max_restarts: int = 10,
        restart_backoff: float = 2.0,
    ) -> None:
        self.cfg = cfg
        self.spark = spark
        self.on_progress = on_progress
        super().__init__(max_restarts, restart_backoff)
        self.processor = build_processor(cfg)
        self.formats: dict[str, str] = {r: s.format for r, s in cfg.sources.items() if isinstance(s, FileChanges)}
        self._batches = 0
        self.query: Any = None

    def _foreach_batch(self, df: Any, batch_id: int) -> None:
        try:
            raw = df.toArrow()
            plan = self.cfg.plan
            progress = self.processor.process(int(batch_id), lambda out: decode_batch(raw, plan, self.formats, out))
            self._batches += 1
            self._publish(progress)
        except BaseException as exc:
            self._error = exc
            raise

    def _publish(self, progress: dict[str, Any]) -> None:
        publish_progress(Path(self.cfg.checkpoint) / "last_progress.json", progress, self.on_progress)

    def _start(self) -> Any:
        frame = source_frame(self.spark, self.cfg)
        return start_foreach_batch(
            frame, self._foreach_batch, self.cfg.spark_checkpoint, f"ssbj-cq-{self.cfg.name}", self.cfg.trigger
        )

    def run(self) -> CqRunSummary:
        """Run until the input is exhausted (available-now) or :meth:`stop` is called."""
        commits = Path(self.cfg.spark_checkpoint) / "commits"
        if self.processor.store.latest() is None and commits.is_dir() and any(commits.iterdir()):
            # Spark would go on after its last batch, the engine from nothing: the answer would miss the past
            raise StateError(
                f"{self.cfg.engine_checkpoint} holds no engine checkpoint but Spark's checkpoint "
                f"{self.cfg.spark_checkpoint} has committed batches; remove both to start over"
            )
        if self.spark is None:
            self.spark = spark_session(self.cfg)
        Path(self.cfg.checkpoint).mkdir(parents=True, exist_ok=True)
        self.processor.open()

        def attempt() -> None:
            self._error = None
            self.query = self._start()
            while not self.stop_event.is_set():
                if self.query.awaitTermination(0.5):
                    break
            if self.stop_event.is_set():
                self._stop_query()
            if self._error is not None or self.query.exception() is not None:
                raise ServiceError(f"the Spark query failed: {self.query.exception()}")

        restarts = self._run_restarting(attempt, self._stop_query, self.processor.reset, log)
        return CqRunSummary(self._batches, self.processor.totals, self.processor.last_progress, restarts)

    def _stop_query(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()


def validate_cq_job(cfg: CqJobConfig) -> list[str]:
    """Check everything a run needs except starting Spark; returns what was checked."""
    plan = cfg.plan
    out = [
        f"query: {len(plan.relations())} relations ({', '.join(plan.relations())}), join tree root {plan.root}; "
        f"result key ({', '.join(cfg.key_columns) or 'none: one row'})"
    ]
    for rel, src in cfg.sources.items():
        if isinstance(src, FileChanges):
            if not Path(src.path).is_dir():
                raise ConfigError(f"sources.{rel}.path {src.path!r} is not a directory")
            out.append(f"sources.{rel}: {src.format} change files in {src.path}")
        else:
            out.append(f"sources.{rel}: {_check_topic(src)}")
    if cfg.snapshot is not None:
        snap = cfg.snapshot
        eng = engine(snap)
        try:
            with eng.connect() as conn:
                insp = sa.inspect(conn)
                for rel in snap.relations:
                    tn = TableName.parse(snap.table_of(rel))
                    if not insp.has_table(tn.name, schema=tn.schema):
                        raise ConfigError(f"snapshot: table {tn} of relation {rel} not found at {snap.display()}")
        except sa.exc.SQLAlchemyError as exc:
            raise ServiceError(f"snapshot: cannot connect to {snap.display()}: {type(exc).__name__}") from None
        out.append(f"snapshot: {', '.join(snap.relations)} from {snap.display()}")
    t = cfg.target
    for name, sink in (("result", t.result), ("deltas", t.deltas), ("dead_letter", t.dead_letter)):
        if sink is None:
            continue
        if isinstance(sink, ParquetSink):
            out.append(f"target.{name}: Parquet directory {sink.path}")
            continue
        try:
            with engine(sink).connect() as conn:
                tn = TableName.parse(sink.table)
                exists = sa.inspect(conn).has_table(tn.name, schema=tn.schema)
        except sa.exc.SQLAlchemyError as exc:
            raise ServiceError(f"target.{name}: cannot connect to {sink.display()}: {type(exc).__name__}") from None
        out.append(
            f"target.{name}: table {sink.table} at {sink.display()} ({'exists' if exists else 'will be created'})"
        )
    out.append(f"checkpoint: {cfg.checkpoint}")
    return out


def _check_topic(src: KafkaSource) -> str:
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError as exc:
        raise DependencyError("a kafka source needs confluent-kafka: pip install 'ssbj[kafka]'") from exc
    conf: dict[str, str | int | float | bool] = {"bootstrap.servers": kafka_bootstrap(src)}
    conf.update({k.removeprefix("kafka."): v for k, v in kafka_client_options(src).items()})
    md = AdminClient(conf).list_topics(timeout=10)
    if src.topic not in md.topics:
        raise ConfigError(f"topic {src.topic!r} does not exist at {src.display()}")
    return f"Kafka topic {src.topic} at {src.display()} ({len(md.topics[src.topic].partitions)} partitions)"
