"""Build a job's adapters (master scan, sinks, processor) from its configuration."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from ssbj import planning
from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.adapters.sink_parquet import ParquetDirSink
from ssbj.adapters.sink_sql import SqlTableSink
from ssbj.adapters.sql_common import is_transient
from ssbj.config import AnyJobConfig, DatabaseSink, JobConfig, KafkaSource, Master, ParquetSink
from ssbj.contracts import CheckpointedMasterScan, TableName, WarehouseSink
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.prefetch import PrefetchingScan
from ssbj.core.shards import Router
from ssbj.credentials import engine, kafka_bootstrap, kafka_client_options
from ssbj.errors import ConfigError, DependencyError, InputError, ServiceError, SSBJError, StateError, TransientError
from ssbj.pipeline import shardplan
from ssbj.pipeline.observe import StepObserver
from ssbj.pipeline.processor import EnrichmentProcessor

log = logging.getLogger("ssbj.master")


def build_sink(cfg: DatabaseSink | ParquetSink) -> WarehouseSink:
    """Return a warehouse (or dead-letter) sink."""
    if cfg.kind == "parquet":
        return ParquetDirSink(cfg.path)

    return SqlTableSink(engine(cfg), cfg.table, create=cfg.create, bulk=cfg.bulk, overlap=cfg.overlap)


def scan_rows(scan: CheckpointedMasterScan) -> int:
    """Rows in R now: one ``COUNT`` (through a read-ahead wrapper too)."""
    inner = scan.inner if isinstance(scan, PrefetchingScan) else scan
    if not isinstance(inner, SqlMasterScan):
        raise StateError(f"cannot count the rows of {type(inner).__name__}")
    return inner.count_rows()


def read_ahead(scan: SqlMasterScan, depth: int) -> CheckpointedMasterScan:
    """``scan`` behind a read-ahead of ``depth`` partitions (``master.prefetch``; 0: as it is)."""
    # an in-memory SQLite database exists once per thread (SingletonThreadPool): no read-ahead thread
    url = scan.engine.url
    in_memory = url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")
    return PrefetchingScan(scan, depth) if depth and not in_memory else scan


def master_scan(
    m: Master,
    eng: sa.Engine,
    layout: dict[str, Any] | None,
    partition_rows: int,
    shard: tuple[Router, int] | None = None,
) -> SqlMasterScan:
    """Return the scan of the job's ``master`` table through ``eng`` (``shard``: one shard's share of it)."""
    return SqlMasterScan(
        eng,
        m.table,
        m.key,
        partition_rows,
        columns=m.columns,
        page_column=m.page_column,
        layout=layout,
        reader=m.reader,
        shard=shard,
    )


class MasterSource:
    """The configured master table: opens scans with a given layout and counts its rows."""

    def __init__(self, cfg: JobConfig) -> None:
        self.cfg = cfg.master
        self.engine = engine(cfg.master)

    def scan(self, layout: dict[str, Any] | None, partition_rows: int) -> CheckpointedMasterScan:
        """Return a scan of R in partitions of ``partition_rows`` rows, with a saved layout or a new one."""
        return read_ahead(master_scan(self.cfg, self.engine, layout, partition_rows), self.cfg.prefetch)

    def schema(self) -> pa.Schema:
        """Return the schema of the projected columns (reflection only, R is not read)."""
        return self.scan(None, 1 << 30).schema  # no partition is read, so no prefetch thread starts

    def info(self) -> tuple[int, pa.Schema]:
        """Return the rows in R now (one COUNT) and the schema of the projected columns."""
        scan = self.scan(None, 1 << 30)
        return scan_rows(scan), scan.schema

    def key_indexed(self) -> bool:
        """Whether an index of the table starts with the join key (reflection only)."""
        return master_scan(self.cfg, self.engine, None, 1 << 30).key_indexed(self.cfg.key)


def build_processor(cfg: JobConfig, store: DirectoryStore, observer: StepObserver | None = None) -> EnrichmentProcessor:
    """Return the processor with its master scan and sinks (connections are opened here)."""
    master = MasterSource(cfg)
    schema = master.schema()
    if cfg.master.columns is None:
        schema_cols = schema
    else:
        schema_cols = pa.schema([schema.field(c) for c in schema.names if c in cfg.master.columns])
    check_key_types(cfg, schema)
    return EnrichmentProcessor(
        cfg.join_settings(schema_cols),
        cfg.stream_schema,
        master.scan,
        master.info,
        build_sink(cfg.sink),
        build_sink(cfg.dead_letter),
        store,
        observer=observer,
    )


def check_key_types(cfg: JobConfig, master_schema: pa.Schema) -> None:
    """Fail clearly when the stream key and the master key cannot be compared."""
    skey, mkey = cfg.join.stream_key, cfg.master.key
    st = cfg.stream_schema.field(skey).type
    mt = master_schema.field(mkey).type
    try:
        planning.check_key_types(cfg.stream_schema, skey, master_schema, mkey)
    except SSBJError as exc:
        raise ConfigError(
            f"join.stream_key {skey!r} ({st}) cannot be joined with master.key {mkey!r} ({mt}): {exc}"
        ) from None


def validate_job(cfg: JobConfig) -> list[str]:
    """Check everything a run needs except starting Spark; returns what was checked."""
    out: list[str] = []
    master = MasterSource(cfg)
    n, schema = master.info()
    check_key_types(cfg, schema)
    out.append(
        f"master: table {cfg.master.table} at {cfg.master.display()}: {n:,} rows; key {cfg.master.key} "
        f"({schema.field(cfg.master.key).type}); columns {', '.join(schema.names)}"
    )
    out.append(_index_advice(cfg, master.key_indexed()))
    src = cfg.source
    if src.kind == "files":
        if not Path(src.path).is_dir():
            raise InputError(f"source.path {src.path!r} is not a directory")
        out.append(f"source: {src.format} files in {src.path}")
    else:
        out.append(_check_kafka(cfg))
    out += check_sinks(cfg)
    if cfg.join.placement == "executors":
        out.append(shardplan.describe(cfg))
    out.append(check_checkpoint(cfg))
    return out


def _index_advice(cfg: JobConfig, indexed: bool) -> str:
    """One line on the join key's index and ``join.hybrid`` (docs/hybrid.md, "Index mode")."""
    key, hybrid = cfg.master.key, cfg.join.hybrid
    if hybrid == "index":
        if indexed:
            return f"join: hybrid index: lookups by {key} go through its index"
        return (
            f"join: warning: hybrid index looks rows up by {key}, which no index starts with: every lookup "
            "reads the whole table (add an index, or scan: hybrid off)"
        )
    if indexed and cfg.join.algorithm == "ssbj":
        return (
            f"join: {key} has an index: hybrid index (SSBJ's cache in front of batched lookups, no scan) "
            f"may serve this job faster than the scan (hybrid {hybrid}); docs/hybrid.md"
        )
    return f"join: scan of {cfg.master.table} (hybrid {hybrid}; {key} {'has an' if indexed else 'has no'} index)"


def check_sinks(cfg: AnyJobConfig) -> list[str]:
    """Check that the sink and the dead-letter sink can be written (a directory, or a database we reach)."""
    out = []
    for name, sink in (("sink", cfg.sink), ("dead_letter", cfg.dead_letter)):
        if isinstance(sink, ParquetSink):
            parent = Path(sink.path).resolve().parent
            if not os.access(parent if not Path(sink.path).exists() else sink.path, os.W_OK):
                raise ConfigError(f"{name}.path {sink.path!r} is not writable")
            out.append(f"{name}: Parquet directory {sink.path}")
        else:
            eng = engine(sink)
            try:
                with eng.connect() as conn:
                    conn.execute(sa.text("SELECT 1"))
                    t = TableName.parse(sink.table)
                    exists = sa.inspect(conn).has_table(t.name, schema=t.schema)
            except sa.exc.SQLAlchemyError as exc:
                error = TransientError if is_transient(exc) else ServiceError
                raise error(f"{name}: cannot connect to {sink.display()}: {type(exc).__name__}") from None
            out.append(f"{name}: table {sink.table} at {sink.display()} ({'exists' if exists else 'will be created'})")
    return out


def check_checkpoint(cfg: AnyJobConfig) -> str:
    """Check that the checkpoint directory (or the nearest existing parent) is writable."""
    ck = Path(cfg.checkpoint)
    probe = ck if ck.exists() else ck.resolve().parent
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise ConfigError(f"checkpoint {cfg.checkpoint!r} is not writable")
    return f"checkpoint: {cfg.checkpoint}"


def _check_kafka(cfg: AnyJobConfig) -> str:
    src = cfg.source
    assert src.kind == "kafka"  # noqa: S101
    return check_kafka_source(src)


def check_kafka_source(src: KafkaSource, label: str = "source") -> str:
    """Check that the topic exists at the broker; return one line describing it (``label``: where in the file)."""
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError as exc:
        raise DependencyError("source.kind kafka needs confluent-kafka: pip install 'ssbj[kafka]'") from exc
    conf: dict[str, str | int | float | bool] = {"bootstrap.servers": kafka_bootstrap(src)}
    conf.update({k.removeprefix("kafka."): v for k, v in kafka_client_options(src).items()})
    md = AdminClient(conf).list_topics(timeout=10)
    if src.topic not in md.topics:
        raise ConfigError(f"{label}.topic {src.topic!r} does not exist at {src.display()}")
    parts = len(md.topics[src.topic].partitions)
    return f"{label}: Kafka topic {src.topic} at {src.display()} ({parts} partitions, reader {src.reader})"


def kafka_reader_options(src: KafkaSource) -> dict[str, str]:
    """Return the Kafka reader's options (secrets resolved: never log them)."""
    opts = {
        "kafka.bootstrap.servers": kafka_bootstrap(src),
        "subscribe": src.topic,
        "startingOffsets": src.starting_offsets,
    }
    if src.max_offsets_per_trigger:
        opts["maxOffsetsPerTrigger"] = str(src.max_offsets_per_trigger)
    for k, v in kafka_client_options(src).items():  # client settings: kafka.<setting>
        opts[k if k.startswith("kafka.") else f"kafka.{k}"] = v
    opts.update(src.reader_options)  # the reader's own options, as they are
    return opts
