"""The DBAPI fetch path of a master scan: rows from the driver's cursor, built into Arrow column-wise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ssbj.errors import InputError


class DriverReader:
    """Rows of a master query fetched through the DBAPI driver and turned into ``schema``'s Arrow table.

    Used whenever connectorx is not (:class:`ssbj.adapters.master_arrow.ArrowReader`), and for
    the hybrid step's lookups, whose ``IN`` lists are bound parameters.
    """

    def __init__(self, schema: pa.Schema, read_types: Sequence[Any], table_name: str) -> None:
        self._schema = schema
        self._read_types = list(read_types)
        self._table_name = table_name

    def fetch_columns(self, conn: Connection, q: sa.Executable) -> tuple[int, list[Sequence[Any]]]:
        """Run ``q`` and return (row count, the values column by column).

        The rows are fetched from the DBAPI cursor as the driver returns them (no SQLAlchemy
        row objects); the few columns whose type needs a conversion on this dialect (SQLite
        dates, for one) are converted column-wise with SQLAlchemy's result processor.
        """
        result = conn.execute(q)
        try:
            cursor = result.cursor
            description = cursor.description
            rows = cursor.fetchall()
        finally:
            result.close()
        if not rows:
            return 0, []
        columns: list[Sequence[Any]] = list(zip(*rows, strict=True))
        dialect = conn.dialect
        for i, t in enumerate(self._read_types):
            proc = t.dialect_impl(dialect).result_processor(dialect, description[i][1])
            if proc is not None:
                columns[i] = list(map(proc, columns[i]))
        return len(rows), columns

    def to_arrow(self, columns: list[Sequence[Any]], p: int) -> pa.Table:
        """``columns`` (the first len(schema) of a fetch) as an Arrow table; ``p`` names the partition in errors."""
        schema = self._schema
        if not columns:
            return schema.empty_table()
        arrays = []
        for field, values in zip(schema, columns, strict=True):
            try:
                arrays.append(pa.array(values, type=field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
                raise InputError(
                    f"column {field.name!r} of master table {self._table_name!r} (partition {p}) has a value "
                    f"that does not fit {field.type}: {e}"
                ) from None
        return pa.Table.from_arrays(arrays, schema=schema)
