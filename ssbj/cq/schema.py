"""Relational schema from ``CREATE TABLE`` statements: columns, types, primary and foreign keys.

The foreign-key graph of a continuous query comes from here; TPC-H's DDL as written in
its specification works once ``PRIMARY KEY`` and ``REFERENCES`` are added (column or
table constraints).  Types map to Arrow types that changes are cast to: a value that does
not cast safely, a NULL in a ``NOT NULL`` or key column, or a string longer than its
``CHAR(n)``/``VARCHAR(n)`` makes the change dead-lettered, not applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ssbj.cq._sqlglot import sqlglot
from ssbj.errors import ConfigError


@dataclass(frozen=True)
class Column:
    """One column: name (lower case), Arrow type, NOT NULL, and the length limit of CHAR/VARCHAR."""

    name: str
    type: pa.DataType
    not_null: bool
    max_length: int | None = None


@dataclass(frozen=True)
class ForeignKey:
    """``columns`` of the owning table reference ``ref_columns`` of ``ref_table``."""

    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]


@dataclass
class Table:
    """A relation of the schema."""

    name: str
    columns: dict[str, Column]
    primary_key: tuple[str, ...]
    foreign_keys: list[ForeignKey] = field(default_factory=list)

    def arrow_schema(self) -> pa.Schema:
        """Return the Arrow schema that changes of this relation are cast to."""
        return pa.schema([pa.field(c.name, c.type, not c.not_null) for c in self.columns.values()])


_INT = {"TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT", "MEDIUMINT"}
_FLOAT = {"FLOAT", "DOUBLE", "REAL", "DOUBLE PRECISION"}
_STRING = {"CHAR", "VARCHAR", "TEXT", "NCHAR", "NVARCHAR", "STRING"}


def _arrow_type(dtype: Any, where: str) -> tuple[pa.DataType, int | None]:
    kind = dtype.this.name if hasattr(dtype.this, "name") else str(dtype.this)
    params = [int(p.this.this) for p in dtype.expressions] if dtype.expressions else []
    if kind in _INT:
        return pa.int64(), None
    if kind in _FLOAT:
        return pa.float64(), None
    if kind in _STRING:
        return pa.string(), (params[0] if params and kind != "TEXT" else None)
    if kind in {"DECIMAL", "NUMERIC"}:
        precision = params[0] if params else 18
        scale = params[1] if len(params) > 1 else 0
        if not 1 <= precision <= 38:
            raise ConfigError(f"{where}: DECIMAL precision {precision} is outside 1..38")
        return pa.decimal128(precision, scale), None
    if kind == "DATE":
        return pa.date32(), None
    if kind in {"BOOLEAN", "BOOL"}:
        return pa.bool_(), None
    raise ConfigError(f"{where}: column type {dtype.sql()} is not supported (integers, DECIMAL, floats, strings, DATE)")


def _names(nodes: list[Any]) -> tuple[str, ...]:
    return tuple(n.name.lower() for n in nodes)


def parse_schema(ddl: str) -> dict[str, Table]:
    """Tables of ``CREATE TABLE`` statements in ``ddl`` by lower-case name."""
    sg, exp = sqlglot()
    try:
        statements = [s for s in sg.parse(ddl) if s is not None]
    except sg.errors.ParseError as exc:
        raise ConfigError(f"schema DDL does not parse: {exc}") from exc
    tables: dict[str, Table] = {}
    for st in statements:
        if not isinstance(st, exp.Create) or str(st.args.get("kind", "")).upper() != "TABLE":
            raise ConfigError(f"schema DDL: only CREATE TABLE statements are supported, got {st.sql()[:60]!r}")
        schema = st.this
        if not isinstance(schema, exp.Schema):
            raise ConfigError(f"schema DDL: CREATE TABLE without columns ({st.sql()[:60]!r}) is not supported")
        name = schema.this.name.lower()
        if name in tables:
            raise ConfigError(f"schema DDL: table {name} is defined twice")
        columns: dict[str, Column] = {}
        pk: tuple[str, ...] = ()
        fks: list[ForeignKey] = []
        for item in schema.expressions:
            if isinstance(item, exp.ColumnDef):
                col = item.name.lower()
                where = f"table {name}, column {col}"
                typ, max_len = _arrow_type(item.args["kind"], where)
                not_null = False
                for cons in item.args.get("constraints") or []:
                    kind = cons.args.get("kind")
                    if isinstance(kind, exp.NotNullColumnConstraint):
                        not_null = not_null or not kind.args.get("allow_null")
                    elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
                        if pk:
                            raise ConfigError(f"schema DDL: table {name} has two primary keys")
                        pk = (col,)
                    elif isinstance(kind, exp.Reference):
                        ref = kind.this
                        fks.append(ForeignKey((col,), ref.this.name.lower(), _names(ref.expressions)))
                if col in columns:
                    raise ConfigError(f"schema DDL: {where} is defined twice")
                columns[col] = Column(col, typ, not_null, max_len)
            elif isinstance(item, exp.PrimaryKey):
                if pk:
                    raise ConfigError(f"schema DDL: table {name} has two primary keys")
                pk = _names(item.expressions)
            elif isinstance(item, exp.ForeignKey):
                ref = item.args["reference"].this
                fks.append(ForeignKey(_names(item.expressions), ref.this.name.lower(), _names(ref.expressions)))
            else:
                raise ConfigError(f"schema DDL: table {name}: {item.sql()!r} is not supported")
        if not pk:
            raise ConfigError(
                f"schema DDL: table {name} has no PRIMARY KEY (every relation of a continuous query needs one)"
            )
        for c in pk:
            if c not in columns:
                raise ConfigError(f"schema DDL: primary key column {name}.{c} is not a column")
            columns[c] = Column(c, columns[c].type, True, columns[c].max_length)
        for fk in fks:
            for c in fk.columns:
                if c not in columns:
                    raise ConfigError(f"schema DDL: foreign key column {name}.{c} is not a column")
        tables[name] = Table(name, columns, pk, fks)
    for t in tables.values():
        for fk in t.foreign_keys:
            target = tables.get(fk.ref_table)
            if target is None:
                raise ConfigError(f"schema DDL: {t.name}{list(fk.columns)} references unknown table {fk.ref_table}")
            ref_cols = fk.ref_columns or target.primary_key
            if tuple(ref_cols) != target.primary_key:
                raise ConfigError(
                    f"schema DDL: {t.name}{list(fk.columns)} references {fk.ref_table}{list(ref_cols)}, "
                    f"which is not its primary key {list(target.primary_key)}"
                )
            if len(fk.columns) != len(target.primary_key):
                raise ConfigError(f"schema DDL: {t.name}{list(fk.columns)} and {fk.ref_table}'s key differ in arity")
    if not tables:
        raise ConfigError("schema DDL holds no CREATE TABLE statement")
    return tables
