"""The job file of a multi-way enrichment job: a SQL SELECT over a stream (or two in a window) and master tables.

:class:`MultiWayJobConfig` (the file has ``sql`` or ``sql_file``; docs/multiway.md) and
:func:`parse_multiway_config`; :mod:`ssbj.config` re-exports both and loads a job file
of either form (:func:`ssbj.config.load_any_config`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import pyarrow as pa
from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from ssbj.config_fields import (
    Database,
    EnrichmentJobBase,
    FileSource,
    KafkaSource,
    _format_errors,
    _Model,
    arrow_type,
    byte_size,
    identifier,
    stream_columns,
    table_name,
)
from ssbj.errors import ConfigError, SSBJError
from ssbj.planning import JoinSettings
from ssbj.sql.inputs import query_inputs


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

    memory: Annotated[int, BeforeValidator(byte_size)] = Field(
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
