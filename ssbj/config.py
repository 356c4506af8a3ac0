"""Job configuration (YAML), validated with pydantic; secrets come from the environment.

A job file names *where* secrets are (an environment variable, or an Airflow connection
id), never the secrets themselves: a URL with a password in the file is rejected.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import pyarrow as pa
import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ssbj.contracts import MAX_SHARDS, TableName
from ssbj.errors import ConfigError, SSBJError
from ssbj.planning import JoinSettings
from ssbj.sql.inputs import query_inputs
from ssbj.units import parse_size

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,63}$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DECIMAL_T = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_SCALARS: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamp_tz": pa.timestamp("us", tz="UTC"),
}
TYPE_NAMES = [*_SCALARS, "decimal(p,s)"]


def identifier(name: str, what: str) -> str:
    """Return ``name`` if it is a plain SQL identifier (letters, digits, _ and $)."""
    if not _IDENT.match(name):
        raise ValueError(f"{what} {name!r} is not a plain identifier (letters, digits, _; at most 64 characters)")
    return name


def table_name(text: str) -> str:
    """Return ``text`` if it is ``table`` or ``schema.table`` of plain identifiers (:class:`TableName`)."""
    try:
        parts = TableName.parse(text).parts
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    for part in parts:
        identifier(part, "table")
    return text


def arrow_type(name: str) -> pa.DataType:
    """Arrow type of a type name used in ``source.schema``."""
    t = _SCALARS.get(name.strip().lower())
    if t is not None:
        return t
    m = _DECIMAL_T.match(name.strip().lower())
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    raise ValueError(f"unknown type {name!r}; allowed: {', '.join(TYPE_NAMES)}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Database(_Model):
    """Where a database is: a URL without password, plus where its password (or whole URL) is."""

    url: str | None = None
    url_env: str | None = Field(None, description="environment variable holding the whole URL")
    password_env: str | None = Field(None, description="environment variable holding the password")
    connection_id: str | None = Field(None, description="Airflow connection id")

    @model_validator(mode="after")
    def _one_source(self) -> Database:
        given = [n for n in ("url", "url_env", "connection_id") if getattr(self, n)]
        if len(given) != 1:
            raise ValueError("give exactly one of url, url_env, connection_id")
        if self.url:
            parts = urlsplit(self.url)
            if parts.password:
                raise ValueError(
                    "the url contains a password; remove it and name an environment variable in password_env"
                )
        for n in ("url_env", "password_env"):
            v = getattr(self, n)
            if v is not None and not _ENV.match(v):
                raise ValueError(f"{n} {v!r} is not an environment variable name")
        return self

    def display(self) -> str:
        """Return the URL with any password hidden, for logs and messages."""
        if self.url:
            return self.url
        return f"${self.url_env}" if self.url_env else f"airflow connection {self.connection_id!r}"


class FileSource(_Model):
    """Files landing in a directory, picked up by Spark's file source."""

    kind: Literal["files"]
    path: str
    format: Literal["csv", "jsonl", "parquet"]
    max_files_per_trigger: Annotated[int, Field(ge=1)] = 100
    glob: str | None = Field(None, description="only files matching this pattern, e.g. '*.json'")
    csv_delimiter: Annotated[str, Field(min_length=1, max_length=1)] = ","
    csv_header: bool = True


class KafkaSource(_Model):
    """A Kafka topic."""

    kind: Literal["kafka"]
    bootstrap_servers: str | None = None
    connection_id: str | None = Field(
        None, description="Airflow connection of the broker (extra: client settings such as bootstrap.servers)"
    )
    topic: str
    reader: Literal["python", "native"] = Field(
        "python", description="python: ssbj's confluent-kafka data source; native: Spark's kafka format (needs jars)"
    )
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: Annotated[int, Field(ge=1)] | None = 200_000
    options: dict[str, str] = Field(default_factory=dict, description="extra client settings (no secrets)")
    reader_options: dict[str, str] = Field(
        default_factory=dict,
        description="options of the Spark reader itself, e.g. endOffsets, pollTimeoutMs, retries (python reader)",
    )
    secret_options_env: dict[str, str] = Field(
        default_factory=dict, description="client setting -> environment variable holding its value"
    )

    @field_validator("options")
    @classmethod
    def _no_secrets(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if any(w in k.lower() for w in ("password", "secret", "token", "sasl.jaas")):
                raise ValueError(f"option {k!r} looks like a secret; give it in secret_options_env instead")
        return v

    @model_validator(mode="after")
    def _one_broker(self) -> KafkaSource:
        if (self.bootstrap_servers is None) == (self.connection_id is None):
            raise ValueError("give exactly one of bootstrap_servers, connection_id")
        return self

    def display(self) -> str:
        """Return where the broker is, for messages (no secrets)."""
        return self.bootstrap_servers or f"airflow connection {self.connection_id!r}"


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


class DatabaseSink(Database):
    """A warehouse table."""

    kind: Literal["database"]
    table: str
    create: bool = True
    bulk: Literal["auto", "insert", "load_data"] = Field(
        "auto", description="auto: LOAD DATA LOCAL INFILE on MySQL/MariaDB when the server allows it"
    )
    overlap: bool = Field(
        True,
        description="load a micro-batch's output step by step while the join computes the rest "
        "(one transaction in a thread); false: write it whole after the join",
    )

    @field_validator("table")
    @classmethod
    def _table(cls, v: str) -> str:
        return table_name(v)


class ParquetSink(_Model):
    """A directory of Parquet files, one per (batch, segment)."""

    kind: Literal["parquet"]
    path: str


SinkConfig = Annotated[DatabaseSink | ParquetSink, Field(discriminator="kind")]


class Trigger(_Model):
    """When micro-batches run."""

    mode: Literal["available-now", "processing-time"] = "available-now"
    interval: str = "10 seconds"
    idle_drain_seconds: Annotated[float, Field(ge=0)] = 30.0


class ValueRange(_Model):
    """Allowed values of a numeric output column (either bound may be left out)."""

    min: float | None = None
    max: float | None = None


class Quality(_Model):
    """The data-quality gate on a run's enriched rows, and the tables of the publish step."""

    source_id: str | None = Field(None, description="stream column identifying a record (row reconciliation)")
    not_null: list[str] = Field(default_factory=list, description="more output columns that must not be NULL")
    ranges: dict[str, ValueRange] = Field(default_factory=dict)
    audit_table: str = "ssbj_audit"
    published_table: str | None = Field(None, description="default: <sink table>_published")
    quarantine_table: str | None = Field(None, description="default: <sink table>_quarantine")

    @field_validator("audit_table", "published_table", "quarantine_table")
    @classmethod
    def _table(cls, v: str | None) -> str | None:
        return v if v is None else table_name(v)


class SparkSettings(_Model):
    """Spark session settings; ``master`` is ignored under spark-submit, which sets its own."""

    master: str = "local[*]"
    conf: dict[str, str] = Field(default_factory=dict)


def stream_columns(v: dict[str, str]) -> dict[str, str]:
    """Return a stream's ``schema`` (column -> type name) if it declares columns of known types."""
    if not v:
        raise ValueError("declare at least one column")
    for name, t in v.items():
        if not name or name.startswith("ssbj_"):
            raise ValueError(f"column name {name!r} is empty or uses the reserved prefix ssbj_")
        arrow_type(t)
    return v


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


def load_config(path: str | Path) -> JobConfig:
    """Read and validate a job file; errors name each field and what it allows."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read job file {p}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
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
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read job file {p}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
    if is_multiway(data):
        return parse_multiway_config(data, str(p), p.resolve().parent)
    return parse_config(data, str(p))
