"""Job configuration (YAML), validated with pydantic; secrets come from the environment.

A job file names *where* secrets are (an environment variable, or an Airflow connection
id), never the secrets themselves: a URL with a password in the file is rejected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import pyarrow as pa
import yaml
from pydantic import (
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ssbj.config_fields import (
    TYPE_NAMES,
    Database,
    DatabaseSink,
    FileSource,
    KafkaSource,
    ParquetSink,
    Quality,
    SinkConfig,
    SparkSettings,
    Trigger,
    ValueRange,
    _Model,
    arrow_type,
    identifier,
    stream_columns,
    table_name,
)
from ssbj.contracts import MAX_SHARDS
from ssbj.errors import ConfigError, SSBJError
from ssbj.planning import JoinSettings
from ssbj.sql.inputs import query_inputs
from ssbj.units import parse_size

__all__ = [  # the job-file models, with the building blocks of ssbj.config_fields re-exported
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


def _size(v: Any) -> int:
    """Parse a size once, at validation (``512MiB`` -> bytes); a bare int is bytes already."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if not isinstance(v, str):
        raise ValueError(f"expected a size such as 512MiB or 64MB, got {type(v).__name__}")
    try:
        return parse_size(v, "size")
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


class Join(_Model):
    """How to join: the ``join:`` section of a job file (defaults are :class:`JoinSettings`' own)."""

    stream_key: str
    algorithm: Literal["ssbj", "meshjoin"] = JoinSettings.algorithm
    type: Literal["inner", "left"] = JoinSettings.join_type
    memory: Annotated[int, BeforeValidator(_size)] = Field(
        JoinSettings.memory_budget, description="operator budget in bytes; written as 512MiB, 64MB, ..."
    )
    switch_factor: Annotated[float, Field(gt=0)] = JoinSettings.switch_factor
    eviction_interval: Annotated[int, Field(ge=1)] = JoinSettings.eviction_interval
    hybrid: Literal["off", "auto", "always"] = Field(
        JoinSettings.hybrid, description="lookup path of the hybrid step (docs/hybrid.md): off | auto | always"
    )
    step_rows: Annotated[int, Field(ge=1)] | None = Field(
        None, description="stream tuples per step (w); default: derived from the memory budget"
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


class EnrichmentJobBase(_Model):
    """What every enrichment job file has: the stream's source, sinks, trigger, checkpoint, Spark, quality.

    :class:`JobConfig` (one master table) and :class:`MultiWayJobConfig` (SQL over several)
    add their join; the job-file format is theirs, field by field.
    """

    name: str
    source: Annotated[FileSource | KafkaSource, Field(discriminator="kind")]
    sink: SinkConfig
    dead_letter: SinkConfig
    trigger: Trigger = Trigger()
    checkpoint: str
    spark: SparkSettings = SparkSettings()
    quality: Quality = Field(default_factory=lambda: Quality.model_validate({}))

    @property
    def spark_checkpoint(self) -> str:
        """Spark's checkpoint location."""
        return str(Path(self.checkpoint) / "spark")

    @property
    def operator_checkpoint(self) -> str:
        """The operator's checkpoint directory (next to Spark's)."""
        return str(Path(self.checkpoint) / "operator")


class JobConfig(EnrichmentJobBase):
    """One enrichment job."""

    name: str = "ssbj-job"
    schema_: dict[str, str] = Field(alias="schema", description="column -> type of a stream record")
    master: Master
    join: Join

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
            partition_rows=m.partition_rows,
            step_rows=j.step_rows,
            prefetch=m.prefetch,
        )


def _format_errors(exc: ValidationError, origin: str) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"] if not str(x).startswith("function-after"))
        loc = loc.replace("schema_", "schema")
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) or got is None or err["type"] == "missing" else f" (got {got!r})"
        lines.append(f"  {loc or '<top>'}: {msg}{shown}")
    return f"{origin}: invalid job configuration\n" + "\n".join(lines)


def read_job_file(p: Path) -> Any:
    """Return a job file's YAML; a file that cannot be read or parsed is a ConfigError naming it."""
    try:
        return yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read job file {p}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from exc


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


# ---------------------------------------------------------------------- multi-way jobs
class MultiWayStream(_Model):
    """The stream of a multi-way job: the name the SQL reads it by, and its record schema."""

    name: str
    schema_: dict[str, str] = Field(alias="schema", description="column -> type of a stream record")
    key: str | None = Field(
        None,
        description="field a record must have (missing: dead letter; JSON null: a NULL key); "
        "default: the stream's first join column",
    )
    event_time: str | None = Field(
        None,
        description="event-time column of a window join (checked against the SQL's BETWEEN); "
        "default: the column the SQL's window uses",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return identifier(v, "stream name")

    @field_validator("key", "event_time")
    @classmethod
    def _key(cls, v: str | None) -> str | None:
        return v if v is None else identifier(v, "column")

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: dict[str, str]) -> dict[str, str]:
        return stream_columns(v)

    @model_validator(mode="after")
    def _key_declared(self) -> MultiWayStream:
        for what, col in (("key", self.key), ("event_time", self.event_time)):
            if col is not None and col not in self.schema_:
                raise ValueError(f"{what} {col!r} is not a column of schema ({', '.join(self.schema_)})")
        return self

    @property
    def arrow_schema(self) -> pa.Schema:
        """Arrow schema of a decoded record of this stream."""
        return pa.schema([pa.field(n, arrow_type(t)) for n, t in self.schema_.items()])


class SecondStream(MultiWayStream):
    """A second stream joined with the first within an event-time window (the SQL's BETWEEN), with its own source."""

    source: Annotated[FileSource | KafkaSource, Field(discriminator="kind")]


class MultiWayMaster(_Model):
    """A master table of a multi-way job, in the job's database."""

    table: str | None = Field(None, description="table in the database (default: the name the SQL uses)")
    mode: Literal["auto", "held", "scanned"] = Field(
        "auto",
        description="held: loaded whole once when the job starts; scanned: read partition by partition, "
        "cyclically; auto: held when it fits join.hold_share of the budget",
    )
    page_column: str | None = Field(None, description="unique column of the partitions (default: primary key)")
    partition_rows: Annotated[int, Field(ge=1)] | None = Field(None, description="b of a scanned master")
    reader: Literal["auto", "driver", "connectorx"] = "auto"

    @field_validator("table")
    @classmethod
    def _table(cls, v: str | None) -> str | None:
        return v if v is None else table_name(v)

    @field_validator("page_column")
    @classmethod
    def _col(cls, v: str | None) -> str | None:
        return v if v is None else identifier(v, "column")


class MultiWayJoinSettings(_Model):
    """The ``join:`` section of a multi-way job."""

    memory: Annotated[int, BeforeValidator(_size)] = Field(
        JoinSettings.memory_budget, description="operator budget in bytes; written as 512MiB, 64MB, ..."
    )
    order_policy: Literal["dppick", "dppick-nosmooth", "fixed", "greedy", "selectivity"] = "dppick"
    store: Literal["memory", "lsm"] = Field("memory", description="waiting store: memory, or lsm (extra lsm)")
    cache: bool = Field(True, description="a cache per scanned master (its rows are not refreshed during a run)")
    hold_share: Annotated[float, Field(gt=0, le=1)] = 0.5
    step_rows: Annotated[int, Field(ge=1)] | None = Field(
        None, description="stream rows per operator step (each step reads one partition per scanned master)"
    )
    lateness: Annotated[float, Field(ge=0)] | None = Field(
        None,
        description="allowed lateness of a window join's streams: seconds for TIMESTAMP event times, units of "
        "an integer time column (as ssbj query --lateness); a later row is a dead letter. Default 0",
    )


class MultiWayJobConfig(EnrichmentJobBase):
    """A multi-way enrichment job: a SQL SELECT over a stream (or two in a window) and master tables in one database."""

    name: str = "ssbj-multiway-job"
    stream: MultiWayStream
    second_stream: SecondStream | None = Field(
        None, description="a second stream joined with the first within an event-time window (its own source)"
    )
    database: Database = Field(description="where the master tables are")
    masters: dict[str, MultiWayMaster] = Field(description="master tables by the name the SQL uses")
    sql: str | None = Field(None, description="the SELECT (docs/sql.md)")
    sql_file: str | None = Field(None, description="file holding the SELECT (relative to the job file)")
    join: MultiWayJoinSettings = Field(default_factory=lambda: MultiWayJoinSettings.model_validate({}))

    @field_validator("masters")
    @classmethod
    def _masters(cls, v: dict[str, MultiWayMaster]) -> dict[str, MultiWayMaster]:
        if not v:
            raise ValueError("declare at least one master table")
        for name in v:
            identifier(name, "master name")
        return v

    @model_validator(mode="after")
    def _query(self) -> MultiWayJobConfig:
        if (self.sql is None) == (self.sql_file is None):
            raise ValueError("give exactly one of sql, sql_file")
        streams = self.stream_names
        for name in streams:
            if name in self.masters:
                raise ValueError(f"{name!r} is both a stream and a master")
        if len(set(streams)) != len(streams):
            raise ValueError(f"second_stream.name {streams[1]!r} is the name of the first stream")
        if self.second_stream is None and self.join.lateness is not None:
            raise ValueError("join.lateness is for a window join of two streams: declare second_stream")
        try:
            names = query_inputs(self.query_text)
        except SSBJError as exc:
            raise ValueError(f"{'sql' if self.sql is not None else 'sql_file'}: {exc}") from None
        known = {*streams, *self.masters}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(
                f"sql reads {', '.join(unknown)}, neither a stream ({', '.join(streams)}) nor a master "
                f"({', '.join(self.masters)})"
            )
        for name in streams:
            if name not in names:
                raise ValueError(f"sql does not read the stream {name!r}")
        unused = [n for n in self.masters if n not in names]
        if unused:
            raise ValueError(f"masters not read by the sql: {', '.join(unused)}")
        return self

    @property
    def query_text(self) -> str:
        """The SELECT, from ``sql`` or ``sql_file``."""
        if self.sql is not None:
            return self.sql
        assert self.sql_file is not None  # noqa: S101  (one of the two, checked above)
        try:
            return Path(self.sql_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read sql_file {self.sql_file!r}: {exc}") from None

    @property
    def stream_schema(self) -> pa.Schema:
        """Arrow schema of a decoded record of the (first) stream."""
        return self.stream.arrow_schema

    @property
    def stream_names(self) -> list[str]:
        """The names the SQL reads the streams by: the first, and the window-joined one if any."""
        return [self.stream.name] + ([self.second_stream.name] if self.second_stream is not None else [])

    def streams(self) -> list[tuple[MultiWayStream, FileSource | KafkaSource]]:
        """Each stream with its source, the first one first."""
        out: list[tuple[MultiWayStream, FileSource | KafkaSource]] = [(self.stream, self.source)]
        if self.second_stream is not None:
            out.append((self.second_stream, self.second_stream.source))
        return out


AnyJobConfig = JobConfig | MultiWayJobConfig


def is_multiway(data: Any) -> bool:
    """Whether a job file's data is a multi-way job (it has ``sql`` or ``sql_file``)."""
    return isinstance(data, dict) and ("sql" in data or "sql_file" in data)


def parse_multiway_config(data: Any, origin: str = "<config>", base: Path | None = None) -> MultiWayJobConfig:
    """Validate a multi-way job given as a mapping; a relative ``sql_file`` is relative to ``base``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: a job file must be a mapping of sections (source, stream, masters, sql, ...)")
    sql_file = data.get("sql_file")
    if base is not None and isinstance(sql_file, str) and not Path(sql_file).is_absolute():
        data = {**data, "sql_file": str(base / sql_file)}
    try:
        return MultiWayJobConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, origin)) from None


def load_any_config(path: str | Path) -> AnyJobConfig:
    """Read and validate a job file of either form: the single-table job or the multi-way job (``sql``)."""
    p = Path(path)
    data = read_job_file(p)
    if is_multiway(data):
        return parse_multiway_config(data, str(p), p.resolve().parent)
    return parse_config(data, str(p))
