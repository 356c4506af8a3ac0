"""The building blocks of every job file: identifiers, column types, databases, sources, sinks, trigger, quality.

Plain pydantic models, validated at load; :mod:`ssbj.config` (enrichment jobs),
:mod:`ssbj.config_multiway` (multi-way jobs) and :mod:`ssbj.config_cq` (continuous
queries) build their job files from them.  Also what every enrichment job file has
(:class:`EnrichmentJobBase`), and reading a job file and reporting its errors.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import pyarrow as pa
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ssbj.contracts import TableName
from ssbj.errors import ConfigError
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


def byte_size(v: Any) -> int:
    """Parse a size once, at validation (``512MiB`` -> bytes); a bare int is bytes already."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if not isinstance(v, str):
        raise ValueError(f"expected a size such as 512MiB or 64MB, got {type(v).__name__}")
    try:
        return parse_size(v, "size")
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


# ---------------------------------------------------------------------- every enrichment job file
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
