"""Warehouse tables of a job as one SQLAlchemy model, rendered as DDL per dialect.

One source of truth for ``sql/``: the enriched (staging) table the job loads, the published
fact table, quarantine, dead letters and the audit table, plus the demo master table.
``ssbj sql`` prints the DDL for a job; ``sql/<dialect>/demo.sql`` is the demo's, kept in
step with this module by a test.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from ssbj.adapters.sink_sql import sql_type_for_arrow
from ssbj.contracts import BATCH_ID_COLUMN, DEAD_LETTER_SCHEMA, SEGMENT_COLUMN
from ssbj.core.operator import master_output_names
from ssbj.errors import ConfigError

DIALECTS: dict[str, sa.Dialect] = {
    "mysql": mysql.dialect(is_mariadb=True),  # type: ignore[no-untyped-call]  # quotes MariaDB's reserved words too
    "postgresql": postgresql.dialect(),  # type: ignore[no-untyped-call]
    "sqlite": sqlite.dialect(),  # type: ignore[no-untyped-call]
}
RUN_ID_COLUMN = "ssbj_run_id"
REASON_COLUMN = "ssbj_reason"
_MYSQL_OPTS: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def _sql_type(t: pa.DataType, name: str) -> sa.types.TypeEngine[Any]:

    st = sql_type_for_arrow(t)
    if st is None:
        raise ConfigError(f"column {name!r} has Arrow type {t}, which has no SQL column type")
    return st


def _columns(schema: pa.Schema) -> list[sa.Column[Any]]:
    return [sa.Column(f.name, _sql_type(f.type, f.name), nullable=f.nullable) for f in schema]


def _batch_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column(BATCH_ID_COLUMN, sa.BigInteger(), nullable=False),
        sa.Column(SEGMENT_COLUMN, sa.Integer(), nullable=False),
    ]


def _short(name: str) -> tuple[str | None, str]:
    schema, _, table = name.rpartition(".")
    return (schema or None), table


def enriched_table(md: sa.MetaData, name: str, schema: pa.Schema) -> sa.Table:
    """Return the table the job loads: output columns, batch id and segment (replaced per batch)."""
    sch, short = _short(name)
    t = sa.Table(short, md, *_columns(schema), *_batch_columns(), schema=sch, **_MYSQL_OPTS)
    sa.Index(f"ix_{short[:40]}_batch", t.c[BATCH_ID_COLUMN], t.c[SEGMENT_COLUMN])
    return t


def published_table(md: sa.MetaData, name: str, schema: pa.Schema) -> sa.Table:
    """Return the fact table readers use: rows of runs that passed the quality gate."""
    sch, short = _short(name)
    t = sa.Table(
        short,
        md,
        *_columns(schema),
        *_batch_columns(),
        sa.Column(RUN_ID_COLUMN, sa.String(250), nullable=False),
        schema=sch,
        **_MYSQL_OPTS,
    )
    sa.Index(f"ix_{short[:40]}_run", t.c[RUN_ID_COLUMN])
    return t


def quarantine_table(md: sa.MetaData, name: str, schema: pa.Schema) -> sa.Table:
    """Return the table of rows of runs that failed the quality gate, with the failed checks."""
    sch, short = _short(name)
    t = sa.Table(
        short,
        md,
        *_columns(schema),
        *_batch_columns(),
        sa.Column(RUN_ID_COLUMN, sa.String(250), nullable=False),
        sa.Column(REASON_COLUMN, sa.Text(), nullable=False),
        schema=sch,
        **_MYSQL_OPTS,
    )
    sa.Index(f"ix_{short[:40]}_run", t.c[RUN_ID_COLUMN])
    return t


def dead_letter_table(md: sa.MetaData, name: str) -> sa.Table:
    """Return the table of malformed source records with reason and position."""
    return enriched_table(md, name, DEAD_LETTER_SCHEMA)


def audit_table(md: sa.MetaData, name: str) -> sa.Table:
    """Return the audit table: one row per run of a job (batch ids, counts, checks, duration, status)."""
    sch, short = _short(name)
    return sa.Table(
        short,
        md,
        sa.Column("job", sa.String(120), primary_key=True),
        sa.Column("run_id", sa.String(250), primary_key=True),
        # the run wrote the (batch id, segment) pairs after "from" (exclusive) up to "to" (inclusive)
        sa.Column("from_batch_id", sa.BigInteger(), nullable=False),
        sa.Column("from_segment", sa.Integer(), nullable=False),
        sa.Column("to_batch_id", sa.BigInteger(), nullable=False),
        sa.Column("to_segment", sa.Integer(), nullable=False),
        sa.Column("rows_in", sa.BigInteger(), nullable=False),
        sa.Column("rows_enriched", sa.BigInteger(), nullable=False),
        sa.Column("source_rows_enriched", sa.BigInteger(), nullable=False),
        sa.Column("unmatched", sa.BigInteger(), nullable=False),
        sa.Column("dead_lettered", sa.BigInteger(), nullable=False),
        sa.Column("waiting", sa.BigInteger(), nullable=False),
        sa.Column("rows_failing_checks", sa.BigInteger()),
        sa.Column("duration_seconds", sa.Float()),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime()),
        sa.Column("details", sa.Text()),
        schema=sch,
        **_MYSQL_OPTS,
    )


def demo_master_table(md: sa.MetaData) -> sa.Table:
    """Return the demo's master table (``ssbj quickstart``)."""
    return sa.Table(
        "customer",
        md,
        sa.Column("c_custkey", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("c_name", sa.String(25), nullable=False),
        sa.Column("c_segment", sa.String(10), nullable=False),
        sa.Column("c_balance", sa.Double(), nullable=False),
        **_MYSQL_OPTS,
    )


DEMO_OUTPUT = pa.schema(
    [
        pa.field("order_id", pa.int64()),
        pa.field("customer_id", pa.int64()),
        pa.field("amount", pa.float64()),
        pa.field("placed_at", pa.timestamp("us")),
        pa.field("c_name", pa.string(), nullable=False),
        pa.field("c_segment", pa.string(), nullable=False),
        pa.field("c_balance", pa.float64(), nullable=False),
    ]
)


def demo_metadata() -> sa.MetaData:
    """Return all tables of the demo job (``ssbj quickstart``)."""
    md = sa.MetaData()
    demo_master_table(md)
    enriched_table(md, "orders_enriched", DEMO_OUTPUT)
    published_table(md, "orders_published", DEMO_OUTPUT)
    quarantine_table(md, "orders_quarantine", DEMO_OUTPUT)
    dead_letter_table(md, "orders_dead_letters")
    audit_table(md, "ssbj_audit")
    return md


def output_schema(stream: pa.Schema, master: pa.Schema, columns: list[str]) -> pa.Schema:
    """Return the enriched rows' schema: stream columns, then master ``columns`` (``_master`` on a clash).

    The operator's naming, keeping the master columns' nullability for the DDL.
    """
    names = master_output_names(stream.names, columns)
    fields = [
        pa.field(n, master.field(c).type, nullable=master.field(c).nullable)
        for n, c in zip(names, columns, strict=True)
    ]
    return pa.schema(list(stream) + fields)


def job_metadata(
    out: pa.Schema, enriched: str, dead_letters: str, published: str, quarantine: str, audit: str
) -> sa.MetaData:
    """Return all warehouse tables of one job, from its output schema and table names."""
    md = sa.MetaData()
    enriched_table(md, enriched, out)
    published_table(md, published, out)
    quarantine_table(md, quarantine, out)
    dead_letter_table(md, dead_letters)
    audit_table(md, audit)
    return md


def render(md: sa.MetaData, dialect: str) -> str:
    """Return the CREATE TABLE and CREATE INDEX statements of ``md`` for ``dialect``."""
    d = DIALECTS.get(dialect)
    if d is None:
        raise ConfigError(f"unknown dialect {dialect!r}; use one of {', '.join(DIALECTS)}")
    out = [f"-- generated by ssbj.warehouse for {dialect}; edit ssbj/warehouse.py, not this file\n"]
    for t in md.sorted_tables:
        out.append(str(CreateTable(t).compile(dialect=d)).strip() + ";\n")
        for ix in sorted(t.indexes, key=lambda i: str(i.name)):
            out.append(str(CreateIndex(ix).compile(dialect=d)).strip() + ";\n")
    return "\n".join(out)


def statements(ddl: str) -> list[str]:
    """Split DDL rendered by :func:`render` into statements (no ``;`` occurs inside them)."""
    body = "\n".join(line for line in ddl.splitlines() if not line.startswith("--"))
    return [st.strip() for st in body.split(";") if st.strip()]
