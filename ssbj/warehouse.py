"""Warehouse tables of a job as one SQLAlchemy model, rendered as DDL per dialect.

One source of truth for ``sql/``: the enriched (staging) table the job loads, the published
fact table, quarantine, dead letters and the audit table, plus the demo master table.
``ssbj sql`` prints the DDL for a job; ``sql/<dialect>/demo.sql`` is the demo's, kept in
step with this module by a test.
"""

from __future__ import annotations

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from ssbj.adapters.sql_tables import MYSQL_TABLE_OPTIONS, batch_columns, batch_table, columns, index_name
from ssbj.contracts import DEAD_LETTER_SCHEMA, TableName
from ssbj.core.operator import master_output_names
from ssbj.errors import ConfigError

DIALECTS: dict[str, sa.Dialect] = {
    "mysql": mysql.dialect(is_mariadb=True),  # type: ignore[no-untyped-call]  # quotes MariaDB's reserved words too
    "postgresql": postgresql.dialect(),  # type: ignore[no-untyped-call]
    "sqlite": sqlite.dialect(),  # type: ignore[no-untyped-call]
}
RUN_ID_COLUMN = "ssbj_run_id"
REASON_COLUMN = "ssbj_reason"


def enriched_table(md: sa.MetaData, name: str, schema: pa.Schema) -> sa.Table:
    """Return the table the job loads: output columns, batch id and segment (the sink's own model)."""
    return batch_table(md, TableName.parse(name), schema)


def published_table(md: sa.MetaData, name: str, schema: pa.Schema) -> sa.Table:
    """Return the fact table readers use: rows of runs that passed the quality gate."""
    tn = TableName.parse(name)
    sch, short = tn.schema, tn.name
    t = sa.Table(
        short,
        md,
        *columns(schema),
        *batch_columns(),
        sa.Column(RUN_ID_COLUMN, sa.String(250), nullable=False),
        schema=sch,
        **MYSQL_TABLE_OPTIONS,
    )
    sa.Index(index_name(short, "ssbj_run"), t.c[RUN_ID_COLUMN])
    return t


def quarantine_table(md: sa.MetaData, name: str, schema: pa.Schema) -> sa.Table:
    """Return the table of rows of runs that failed the quality gate, with the failed checks."""
    tn = TableName.parse(name)
    sch, short = tn.schema, tn.name
    t = sa.Table(
        short,
        md,
        *columns(schema),
        *batch_columns(),
        sa.Column(RUN_ID_COLUMN, sa.String(250), nullable=False),
        sa.Column(REASON_COLUMN, sa.Text(), nullable=False),
        schema=sch,
        **MYSQL_TABLE_OPTIONS,
    )
    sa.Index(index_name(short, "ssbj_run"), t.c[RUN_ID_COLUMN])
    return t


def dead_letter_table(md: sa.MetaData, name: str) -> sa.Table:
    """Return the table of malformed source records with reason and position."""
    return enriched_table(md, name, DEAD_LETTER_SCHEMA)


def audit_table(md: sa.MetaData, name: str) -> sa.Table:
    """Return the audit table: one row per run of a job (batch ids, counts, checks, duration, status)."""
    tn = TableName.parse(name)
    sch, short = tn.schema, tn.name
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
        **MYSQL_TABLE_OPTIONS,
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
        **MYSQL_TABLE_OPTIONS,
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
