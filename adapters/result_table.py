"""The maintained answer of a continuous query as a warehouse table, kept current by idempotent writes.

A micro-batch's writes are absolute, never increments: the new row of every changed group
(upsert) and the keys of vanished groups (delete), so writing a batch twice leaves the table
as once.  :class:`SqlResultTable` applies them in one transaction (delete the changed keys
with NULL-safe equality, insert the new rows); with ``full`` it replaces the whole table by
the answer (the first batch, or a replay that rolled the state back to nothing, so rows a
lost earlier state left behind go too).  :class:`ParquetResultFile` holds the answer in one
Parquet file replaced atomically per batch (a Parquet file cannot be updated in place).
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from ssbj.adapters.sql_common import SqlRunner, make_engine, safe_url
from ssbj.adapters.sql_tables import MYSQL_TABLE_OPTIONS, columns
from ssbj.contracts import TableName
from ssbj.errors import ServiceError, StateError
from ssbj.retry import RetryPolicy

log = logging.getLogger(__name__)

RESULT_FILE = "result.parquet"


class ResultTarget(Protocol):
    """Where a continuous query's answer is kept."""

    def prepare(self, schema: pa.Schema, key: list[str]) -> None:
        """Create the target for rows of ``schema`` keyed by ``key`` (or check that it fits)."""

    def write(self, upserts: pa.Table, deletes: pa.Table, result: Callable[[], pa.Table], full: bool) -> None:
        """Apply one batch: upsert rows, delete keys; with ``full`` replace everything by ``result()``."""

    def close(self) -> None:
        """Release connections."""


class SqlResultTable:
    """The answer in a database table, one row per group."""

    def __init__(self, target: Engine | URL | str, table: str, *, create: bool = True, chunk_rows: int = 5000) -> None:
        self._engine, self._owns_engine = make_engine(target)
        self._name = table
        self._table_name = TableName.parse(table)
        self._create = create
        self._chunk = chunk_rows
        self._runner = SqlRunner(self._engine, RetryPolicy(), f"result table {table}", log)
        self._table: sa.Table | None = None
        self._key: list[str] = []

    def prepare(self, schema: pa.Schema, key: list[str]) -> None:
        """Create the table (nullable as the answer's columns) or check it has the answer's columns."""
        self._key = list(key)
        self._table = self._runner.run(lambda conn: self._prepare(conn, schema), "preparing", transaction=True)

    def _prepare(self, conn: Connection, schema: pa.Schema) -> sa.Table:
        n = self._table_name
        if sa.inspect(conn).has_table(n.name, schema=n.schema):
            t = sa.Table(n.name, sa.MetaData(), schema=n.schema, autoload_with=conn)
            missing = [c for c in schema.names if c not in t.c]
            if missing:
                raise StateError(
                    f"result table {self._name!r} in {safe_url(self._engine)} lacks column(s) {', '.join(missing)}"
                )
            return t
        if not self._create:
            raise StateError(f"result table {self._name!r} does not exist in {safe_url(self._engine)} (create: false)")
        t = sa.Table(n.name, sa.MetaData(), *columns(schema), schema=n.schema, **MYSQL_TABLE_OPTIONS)
        t.create(conn)
        log.info("created result table %s on %s", self._name, safe_url(self._engine))
        return t

    def write(self, upserts: pa.Table, deletes: pa.Table, result: Callable[[], pa.Table], full: bool) -> None:
        """Apply one batch's writes in one transaction."""
        t = self._table
        if t is None:
            raise StateError("SqlResultTable.write before prepare()")
        rows = result() if full else upserts
        replace_all = full or (not self._key and (len(upserts) > 0 or len(deletes) > 0))
        gone: list[dict[str, Any]] = []
        if not replace_all and self._key:
            gone = pa.concat_tables([deletes.select(self._key), upserts.select(self._key)]).to_pylist()
        params = rows.select([c for c in rows.column_names if c in t.c]).to_pylist()
        where = sa.and_(*(t.c[k].is_not_distinct_from(sa.bindparam(f"k_{i}")) for i, k in enumerate(self._key)))
        binds = [{f"k_{i}": g[k] for i, k in enumerate(self._key)} for g in gone]

        def work(conn: Connection) -> None:
            if replace_all:
                conn.execute(sa.delete(t))
            for lo in range(0, len(binds), self._chunk):
                conn.execute(sa.delete(t).where(where), binds[lo : lo + self._chunk])
            for lo in range(0, len(params), self._chunk):
                conn.execute(sa.insert(t), params[lo : lo + self._chunk])

        self._runner.run(work, "writing the changed groups", transaction=True)

    def close(self) -> None:
        """Release the engine (if this object made it)."""
        if self._owns_engine:
            self._engine.dispose()


class ParquetResultFile:
    """The answer in ``<path>/result.parquet``, replaced atomically every batch."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._schema: pa.Schema | None = None

    def prepare(self, schema: pa.Schema, key: list[str]) -> None:
        """Create the directory."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ServiceError(f"cannot create result directory {self.directory}: {exc}") from None
        self._schema = schema

    def write(self, upserts: pa.Table, deletes: pa.Table, result: Callable[[], pa.Table], full: bool) -> None:
        """Write the whole answer (the file cannot be updated in place)."""
        if self._schema is None:
            raise StateError("ParquetResultFile.write before prepare()")
        table = result()
        target = self.directory / RESULT_FILE
        tmp = target.with_name(f".{RESULT_FILE}.{uuid.uuid4().hex}.tmp")
        try:
            with tmp.open("wb") as f:
                pq.write_table(table, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def close(self) -> None:
        """Nothing to release."""
