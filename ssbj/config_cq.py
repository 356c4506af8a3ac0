"""The job file of a continuous query (``query:`` section), validated with pydantic.

One change source per relation (a Kafka topic of Debezium JSON envelopes, or a landing
directory of change files), an optional initial snapshot of relations read from a
database, and the warehouse target: the maintained result table (upserted by group key),
an optional deltas table and the dead letters.  The query's SQL and DDL are planned when
the file is loaded, so an unsupported query or a relation without a source is reported
with the field that names it.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from ssbj.config import (
    Database,
    KafkaSource,
    SinkConfig,
    SparkSettings,
    Trigger,
    _format_errors,
    _Model,
    identifier,
    read_job_file,
    table_name,
)
from ssbj.cq.query import QueryPlan, plan_query
from ssbj.cq.schema import parse_schema
from ssbj.errors import ConfigError, SSBJError


class FileChanges(_Model):
    """Change files landing in a directory: Debezium JSON lines, or Parquet rows with ``_op``."""

    kind: Literal["files"]
    path: str
    format: Literal["debezium", "parquet"] = Field(
        "debezium",
        description="debezium: one JSON envelope (op c/u/d/r, before, after) a line; "
        "parquet: the relation's columns and _op ('+' insert, '-' delete)",
    )
    max_files_per_trigger: Annotated[int, Field(ge=1)] = 100
    glob: str | None = Field(None, description="only files matching this pattern, e.g. '*.json'")


ChangeSource = Annotated[FileChanges | KafkaSource, Field(discriminator="kind")]


class QueryText(_Model):
    """The query and its tables: inline text or files (relative to the job file)."""

    sql: str | None = Field(None, description="one SELECT (FK-acyclic equi-joins, SUM/COUNT/AVG, GROUP BY)")
    sql_file: str | None = None
    ddl: str | None = Field(None, description="CREATE TABLE statements with PRIMARY KEY and REFERENCES")
    ddl_file: str | None = None

    @model_validator(mode="after")
    def _one_each(self) -> QueryText:
        for a, b in (("sql", "sql_file"), ("ddl", "ddl_file")):
            if (getattr(self, a) is None) == (getattr(self, b) is None):
                raise ValueError(f"give exactly one of {a}, {b}")
        return self


class Snapshot(Database):
    """Relations read whole from a database when the job starts from no checkpoint (before any change)."""

    relations: list[str] = Field(min_length=1)
    tables: dict[str, str] = Field(default_factory=dict, description="relation -> table (default: same name)")

    @field_validator("relations")
    @classmethod
    def _rels(cls, v: list[str]) -> list[str]:
        for r in v:
            identifier(r, "relation")
        return v

    @field_validator("tables")
    @classmethod
    def _tables(cls, v: dict[str, str]) -> dict[str, str]:
        for t in v.values():
            table_name(t)
        return v

    def table_of(self, relation: str) -> str:
        """Return the snapshot table of ``relation``."""
        return self.tables.get(relation, relation)


class Target(_Model):
    """Where the answer goes."""

    result: SinkConfig | None = Field(
        None, description="the maintained answer, one row per group, upserted by the group-by columns"
    )
    deltas: SinkConfig | None = Field(None, description="every change of the answer (_op, _seq) per micro-batch")
    dead_letter: SinkConfig

    @model_validator(mode="after")
    def _some_output(self) -> Target:
        if self.result is None and self.deltas is None:
            raise ValueError("give result, deltas or both")
        return self


class CqJobConfig(_Model):
    """A continuous query maintained in Spark Structured Streaming."""

    model_config = ConfigDict(extra="forbid", frozen=True, ignored_types=(cached_property,))

    name: str = "ssbj-cq"
    query: QueryText
    sources: dict[str, ChangeSource] = Field(default_factory=dict, description="relation -> its change stream")
    snapshot: Snapshot | None = None
    target: Target
    trigger: Trigger = Trigger()
    checkpoint: str
    full_checkpoint_every: Annotated[int, Field(ge=1)] = Field(
        20,
        description="write the whole engine state every N batches; the batches between are checkpointed as "
        "increments (the array engine: the hash rows and tuple slots the batch wrote, patched on restore) or, "
        "with the dict engine, as their changes, re-applied on restore",
    )
    spark: SparkSettings = SparkSettings()

    @field_validator("sources")
    @classmethod
    def _names(cls, v: dict[str, Any]) -> dict[str, Any]:
        for r in v:
            identifier(r, "relation")
        return v

    @cached_property
    def plan(self) -> QueryPlan:
        """The planned query (SQL and DDL read once)."""
        q = self.query
        sql = q.sql if q.sql is not None else _read(q.sql_file, "query.sql_file")
        ddl = q.ddl if q.ddl is not None else _read(q.ddl_file, "query.ddl_file")
        return plan_query(sql, parse_schema(ddl))

    @property
    def spark_checkpoint(self) -> str:
        """Spark's checkpoint location."""
        return str(Path(self.checkpoint) / "spark")

    @property
    def engine_checkpoint(self) -> str:
        """The continuous query's checkpoint directory (next to Spark's)."""
        return str(Path(self.checkpoint) / "cq")

    @property
    def key_columns(self) -> list[str]:
        """The result table's key: the output's group-by columns."""
        return [o.name for o in self.plan.outputs if o.key is not None]


def _read(path: str | None, field: str) -> str:
    assert path is not None  # noqa: S101
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{field}: cannot read {path}: {exc.strerror or exc}") from None


def is_cq_job(data: Any) -> bool:
    """Whether a parsed job file describes a continuous query (it has a ``query`` section)."""
    return isinstance(data, dict) and "query" in data


def is_cq_file(path: str | Path) -> bool:
    """Whether the job file at ``path`` describes a continuous query."""
    try:
        return is_cq_job(yaml.safe_load(Path(path).read_text()))
    except (OSError, yaml.YAMLError):
        return False  # the ordinary loader reports it


def _check_plan(cfg: CqJobConfig, origin: str) -> None:
    try:
        plan = cfg.plan
    except SSBJError as exc:
        raise ConfigError(f"{origin}: query: {exc}") from None
    rels = plan.relations()
    problems = []
    snap = cfg.snapshot.relations if cfg.snapshot else []
    for r in cfg.sources:
        if r not in rels:
            problems.append(f"  sources.{r}: not a relation of the query ({', '.join(rels)})")
    for r in snap:
        if r not in rels:
            problems.append(f"  snapshot.relations: {r!r} is not a relation of the query ({', '.join(rels)})")
    for r in rels:
        if r not in cfg.sources and r not in snap:
            problems.append(f"  sources: relation {r!r} has no change source and is not in snapshot.relations")
    if cfg.target.result is not None and not plan.grouped:
        problems.append(
            "  target.result: the query has no GROUP BY or aggregate, so its rows have no key to upsert by; "
            "use target.deltas"
        )
    if problems:
        raise ConfigError(f"{origin}: invalid continuous-query job\n" + "\n".join(problems))


def parse_cq_config(data: Any, origin: str = "<config>", base: Path | None = None) -> CqJobConfig:
    """Validate a continuous-query job given as a mapping; query files are relative to ``base``."""
    if not is_cq_job(data):
        raise ConfigError(f"{origin}: a continuous-query job file needs a query section")
    q = data.get("query")
    if base is not None and isinstance(q, dict):
        q = dict(q)
        for k in ("sql_file", "ddl_file"):
            if isinstance(q.get(k), str):
                q[k] = str(base / q[k])
        data = {**data, "query": q}
    try:
        cfg = CqJobConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, origin).replace("invalid job", "invalid continuous-query job")) from None
    _check_plan(cfg, origin)
    return cfg


def load_cq_config(path: str | Path) -> CqJobConfig:
    """Read and validate a continuous-query job file."""
    p = Path(path)
    data = read_job_file(p)
    return parse_cq_config(data, str(p), p.resolve().parent)
