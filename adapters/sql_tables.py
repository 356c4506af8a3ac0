"""The one SQL model of a table the job writes: Arrow columns, batch id and segment, one index.

The sink creates tables with :func:`batch_table`; :mod:`ssbj.warehouse` renders the same
definition as DDL (``sql/``, ``ssbj sql``), so the two cannot drift apart.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from ssbj.contracts import BATCH_ID_COLUMN, SEGMENT_COLUMN, TableName
from ssbj.errors import InputError

_MYSQL = ("mysql", "mariadb")
_MAX_IDENTIFIER = 60  # below MySQL's 64 and PostgreSQL's 63
# full Unicode on MySQL/MariaDB whatever the server's default character set (ignored elsewhere)
MYSQL_TABLE_OPTIONS: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def sql_type_for_arrow(t: pa.DataType) -> sa.types.TypeEngine[Any] | None:
    """Return the column type a new sink table gets for Arrow type ``t``, or None if unsupported."""
    if pa.types.is_dictionary(t):
        return sql_type_for_arrow(t.value_type)
    if pa.types.is_boolean(t):
        return sa.Boolean()
    if pa.types.is_integer(t):
        width = t.bit_width + (1 if pa.types.is_unsigned_integer(t) else 0)
        if width <= 16:
            return sa.SmallInteger()
        if width <= 32:
            return sa.Integer()
        if width <= 64:
            return sa.BigInteger()
        return sa.Numeric(20, 0)  # uint64
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return sa.REAL()
    if pa.types.is_float64(t):
        return sa.Double()
    if pa.types.is_decimal(t):
        return sa.Numeric(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return sa.Text().with_variant(mysql.LONGTEXT(), *_MYSQL)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return sa.LargeBinary().with_variant(mysql.LONGBLOB(), *_MYSQL)
    if pa.types.is_fixed_size_binary(t):
        return sa.LargeBinary().with_variant(mysql.LONGBLOB(), *_MYSQL)
    if pa.types.is_date(t):
        return sa.Date()
    if pa.types.is_timestamp(t):
        return sa.DateTime(timezone=t.tz is not None).with_variant(mysql.DATETIME(fsp=6), *_MYSQL)
    if pa.types.is_time(t):
        return sa.Time().with_variant(mysql.TIME(fsp=6), *_MYSQL)
    return None


def index_name(table: str, what: str = "ssbj_batch_seg") -> str:
    """Return ``ix_<table>_<what>``, shortened with a digest of the table name past 60 characters."""
    name = f"ix_{table}_{what}"
    if len(name) <= _MAX_IDENTIFIER:
        return name
    digest = hashlib.sha1(table.encode(), usedforsecurity=False).hexdigest()[:10]
    return f"ix_{table[: _MAX_IDENTIFIER - 16 - len(what)]}_{digest}_{what}"


def columns(schema: pa.Schema) -> list[sa.Column[Any]]:
    """Return one nullable-as-in-Arrow column per field of ``schema``."""
    out: list[sa.Column[Any]] = []
    for f in schema:
        st = sql_type_for_arrow(f.type)
        if st is None:
            raise InputError(f"output column {f.name!r} has Arrow type {f.type}, which the SQL sink cannot store")
        out.append(sa.Column(f.name, st, nullable=f.nullable))
    return out


def batch_columns() -> list[sa.Column[Any]]:
    """Return the batch id and segment columns every written row carries."""
    return [
        sa.Column(BATCH_ID_COLUMN, sa.BigInteger(), nullable=False),
        sa.Column(SEGMENT_COLUMN, sa.Integer(), nullable=False),
    ]


def batch_table(md: sa.MetaData, name: TableName, schema: pa.Schema) -> sa.Table:
    """Return the table rows of ``schema`` are loaded into, replaced per (batch id, segment)."""
    t = sa.Table(name.name, md, *columns(schema), *batch_columns(), schema=name.schema, **MYSQL_TABLE_OPTIONS)
    sa.Index(index_name(name.name), t.c[BATCH_ID_COLUMN], t.c[SEGMENT_COLUMN])
    return t
