"""Job configuration (YAML), validated with pydantic; secrets come from the environment.

The single-table enrichment job (:class:`JobConfig`) is here; the multi-way job is in
:mod:`ssbj.config_multiway`, and :func:`load_any_config` reads either.  A job file
names *where* secrets are (an environment variable, or an Airflow connection id), never
the secrets themselves: a URL with a password in the file is rejected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import pyarrow as pa
from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from ssbj.config_fields import (
    TYPE_NAMES,
    Database,
    DatabaseSink,
    EnrichmentJobBase,
    FileSource,
    KafkaSource,
    ParquetSink,
    Quality,
    SinkConfig,
    SparkSettings,
    Trigger,
    ValueRange,
    _format_errors,
    _Model,
    arrow_type,
    byte_size,
    identifier,
    read_job_file,
    stream_columns,
    table_name,
)
from ssbj.config_multiway import (
    MultiWayJobConfig,
    MultiWayJoinSettings,
    MultiWayMaster,
    MultiWayStream,
    SecondStream,
    parse_multiway_config,
)
from ssbj.contracts import MAX_SHARDS
from ssbj.errors import ConfigError
from ssbj.planning import JoinSettings

__all__ = [  # the job-file models, with ssbj.config_fields' building blocks and ssbj.config_multiway re-exported
    "AnyJobConfig",
    "Database",
    "DatabaseSink",
    "EnrichmentJobBase",
    "FileSource",
    "JobConfig",
    "Join",
    "KafkaSource",
    "Master",
    "MultiWayJobConfig",
    "MultiWayJoinSettings",
    "MultiWayMaster",
    "MultiWayStream",
    "ParquetSink",
    "Quality",
    "SecondStream",
    "SharedApplication",
    "SinkConfig",
    "SparkSettings",
    "TYPE_NAMES",
    "Trigger",
    "ValueRange",
    "_Model",
    "_format_errors",
    "arrow_type",
    "identifier",
    "is_multiway",
    "load_any_config",
    "load_config",
    "parse_config",
    "parse_multiway_config",
    "read_job_file",
    "stream_columns",
    "table_name",
]


class Master(Database):
    """The master table R, scanned cyclically in partitions of ``partition_rows`` rows."""

    table: str
    key: str
    columns: list[str] | None = None
    page_column: str | None = None
    partition_rows: Annotated[int, Field(ge=1)] | None = None
    reader: Literal["auto", "driver", "connectorx"] = Field(
        "auto",
        description="auto: connectorx (Arrow, 14.1x faster on MariaDB) when installed and the page column is an int",
    )
    prefetch: Annotated[int, Field(ge=0, strict=True)] = Field(
        0,  # off: measured 0.97-1.12x (the readers hold the GIL, bench/results/prefetch.md) for a disk buffer
        description="master partitions read ahead in a background thread while a step joins (0: off); "
        "each takes one more disk buffer of the memory budget",
    )

    @field_validator("table")
    @classmethod
    def _table(cls, v: str) -> str:
        return table_name(v)

    @field_validator("key", "page_column")
    @classmethod
    def _col(cls, v: str | None) -> str | None:
        return v if v is None else identifier(v, "column")

    @field_validator("columns")
    @classmethod
    def _cols(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            for c in v:
                identifier(c, "column")
        return v


class Join(_Model):
    """How to join: the ``join:`` section of a job file (defaults are :class:`JoinSettings`' own)."""

    stream_key: str
    algorithm: Literal["ssbj", "meshjoin"] = JoinSettings.algorithm
    type: Literal["inner", "left"] = JoinSettings.join_type
    memory: Annotated[int, BeforeValidator(byte_size)] = Field(
        JoinSettings.memory_budget, description="operator budget in bytes; written as 512MiB, 64MB, ..."
    )
    switch_factor: Annotated[float, Field(gt=0)] = JoinSettings.switch_factor
    eviction_interval: Annotated[int, Field(ge=1)] = JoinSettings.eviction_interval
    hybrid: Literal["off", "auto", "always", "index"] = Field(
        JoinSettings.hybrid,
        description="lookup path of the hybrid step (docs/hybrid.md): off | auto | always | index (no scan)",
    )
    step_rows: Annotated[int, Field(ge=1)] | None = Field(
        None, description="stream tuples per step (w); default: derived from the memory budget"
    )
    switching: Literal["pipelined", "paper"] = Field(
        JoinSettings.switching,
        description="SSBJ's switching FSM: pipelined (per value, a value decided in the R-cycle after its "
        "tracking began) or paper (Algorithm 1's global incrementing, switching and phase-out R-cycles)",
    )
    unique_key_switch: bool = Field(
        JoinSettings.unique_key_switch,
        description="when the master vouches that its key is unique (a primary key), decide each value in one "
        "R-cycle without counting rows; false: use `switching` as for any key",
    )
    early_eviction: bool = Field(
        JoinSettings.early_eviction,
        description="SSBJ with the per-value FSM: a cached value whose hits are clearly below break-even "
        "leaves at the next R-cycle start; false: only every eviction_interval R-cycles",
    )
    threads: Annotated[int, Field(ge=1, le=256)] = Field(
        JoinSettings.threads,
        description="threads of the complete cache's probe and takes (a budget that holds all of R); "
        "placement: driver only (a shard is one Spark task slot)",
    )
    index_cycle_tuples: Annotated[int, Field(ge=1)] | None = Field(
        None,
        description="hybrid: index: stream tuples per R-cycle, after which every cached value has been looked up "
        "again (the freshness bound); default: twice the waiting tuples the budget would hold",
    )
    placement: Literal["driver", "executors"] = Field(
        "driver",
        description="where the join runs: one operator on the Spark driver, or P shards in the executors",
    )
    shards: Annotated[int, Field(ge=1, le=MAX_SHARDS)] | None = Field(
        None, description="P, shards in the executors (placement: executors); default: Spark's default parallelism"
    )
    shard_router: Literal["auto", "range", "mod", "hash"] = Field(
        "auto",
        description="join key -> shard: range (integer key that is the master's page column), mod (integer key), "
        "hash (any key; every shard then reads all of R); auto picks in that order",
    )
    exchange: Literal["shuffle", "read"] = Field(
        "shuffle",
        description="how a micro-batch reaches the shards (placement: executors): shuffle (source tasks decode "
        "and route, Spark's shuffle moves each shard's rows to its task) or read (each shard's task reads the "
        "batch's Kafka offset ranges itself and keeps its share, on the executor that holds its state; "
        "python Kafka reader only)",
    )


class SharedApplication(_Model):
    """The ``shared:`` section: settings of a shared application (``ssbj run --config a.yaml b.yaml ...``).

    Every job of one application must give the same section (docs/shared.md).
    """

    memory: Annotated[int, BeforeValidator(byte_size), Field(ge=1 << 20)] | None = Field(
        default=None,
        description="one budget for the whole application, split among its scan groups and stream store by "
        "the plan (ssbj plan --config ...); default: each group gets the largest join.memory",
    )
    disk_buffer: Literal["largest", "pooled"] = Field(
        default="largest",
        description="b of a master scan the jobs share: 'largest', the largest b any of them has alone (fewest "
        "master rows read); 'pooled', the sum of theirs (their disk buffers' rows in one: an R-cycle that many "
        "times shorter, so stream rows wait fewer steps and take less memory, for as many master rows read as "
        "separate scans; bench/shared)",
    )
    drift: Annotated[float, Field(gt=0, le=100)] = Field(
        default=0.5,
        description="re-optimize when a measured rate or waiting share moves this far (relative) from the "
        "one the running plan assumed",
    )
    measure_calls: Annotated[int, Field(ge=1)] = Field(
        default=3, description="micro-batches measured before the measurements are compared with the plan's"
    )


class JobConfig(EnrichmentJobBase):
    """One enrichment job."""

    name: str = "ssbj-job"
    schema_: dict[str, str] = Field(alias="schema", description="column -> type of a stream record")
    master: Master
    join: Join
    shared: SharedApplication = SharedApplication()

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: dict[str, str]) -> dict[str, str]:
        return stream_columns(v)

    @model_validator(mode="after")
    def _key_declared(self) -> JobConfig:
        if self.join.stream_key not in self.schema_:
            raise ValueError(
                f"join.stream_key {self.join.stream_key!r} is not a column of schema ({', '.join(self.schema_)})"
            )
        return self

    @model_validator(mode="after")
    def _exchange(self) -> JobConfig:
        if self.join.exchange == "read" and (self.source.kind != "kafka" or self.source.reader != "python"):
            raise ValueError("join.exchange: read needs a Kafka source with reader: python")
        return self

    @model_validator(mode="after")
    def _threads(self) -> JobConfig:
        if self.join.threads > 1 and self.join.placement == "executors":
            raise ValueError(
                "join.threads > 1 needs placement: driver (in the executors each shard has one task slot's core)"
            )
        return self

    @model_validator(mode="after")
    def _quality_columns(self) -> JobConfig:
        q = self.quality
        if q.source_id is not None and q.source_id not in self.schema_:
            raise ValueError(f"quality.source_id {q.source_id!r} is not a column of schema ({', '.join(self.schema_)})")
        return self

    @property
    def stream_schema(self) -> pa.Schema:
        """Arrow schema of a decoded stream record."""
        return pa.schema([pa.field(n, arrow_type(t)) for n, t in self.schema_.items()])

    def join_settings(self, master_schema: pa.Schema | None = None) -> JoinSettings:
        """Return the join's settings; without ``master.columns``, every column of ``master_schema``."""
        m, j = self.master, self.join
        cols = tuple(m.columns) if m.columns is not None else tuple(master_schema.names if master_schema else ())
        return JoinSettings(
            stream_key=j.stream_key,
            master_key=m.key,
            master_columns=cols or (m.key,),
            algorithm=j.algorithm,
            join_type=j.type,
            memory_budget=j.memory,
            switch_factor=j.switch_factor,
            eviction_interval=j.eviction_interval,
            hybrid=j.hybrid,
            switching=j.switching,
            unique_key_switch=j.unique_key_switch,
            early_eviction=j.early_eviction,
            threads=j.threads,
            index_cycle_tuples=j.index_cycle_tuples,
            partition_rows=m.partition_rows,
            step_rows=j.step_rows,
            prefetch=m.prefetch,
        )


def load_config(path: str | Path) -> JobConfig:
    """Read and validate a job file; errors name each field and what it allows."""
    p = Path(path)
    data = read_job_file(p)
    return parse_config(data, str(p))


def parse_config(data: Any, origin: str = "<config>") -> JobConfig:
    """Validate a job configuration given as a mapping."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: a job file must be a mapping of sections (source, master, join, sink, ...)")
    if "sql" in data or "sql_file" in data:
        raise ConfigError(
            f"{origin}: a multi-way job (it has sql or sql_file); this command takes single-table jobs only "
            "(multi-way jobs: ssbj run, validate, check, gate, publish, quarantine)"
        )
    try:
        return JobConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, origin)) from None


AnyJobConfig = JobConfig | MultiWayJobConfig


def is_multiway(data: Any) -> bool:
    """Whether a job file's data is a multi-way job (it has ``sql`` or ``sql_file``)."""
    return isinstance(data, dict) and ("sql" in data or "sql_file" in data)


def load_any_config(path: str | Path) -> AnyJobConfig:
    """Read and validate a job file of either form: the single-table job or the multi-way job (``sql``)."""
    p = Path(path)
    data = read_job_file(p)
    if is_multiway(data):
        return parse_multiway_config(data, str(p), p.resolve().parent)
    return parse_config(data, str(p))
