"""The layout of a partitioned master table: K - 1 boundary values of the page column.

A layout is saved with the job's checkpoint, so its boundary values are encoded as
type-tagged JSON (:func:`encode_value` / :func:`decode_value`); the database computes a
row's partition from them (:func:`partition_expr`).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ssbj.errors import CheckpointError, InputError

LAYOUT_VERSION = 1


def encode_value(v: object) -> dict[str, Any]:
    """Encode a page-column value as a type-tagged JSON value."""
    # bool before int, datetime before date: each is a subclass of the other
    if isinstance(v, bool):
        return {"t": "bool", "v": v}
    if isinstance(v, int):
        return {"t": "int", "v": v}
    if isinstance(v, str):
        return {"t": "str", "v": v}
    if isinstance(v, dt.datetime):
        return {"t": "datetime", "v": v.isoformat()}
    if isinstance(v, dt.date):
        return {"t": "date", "v": v.isoformat()}
    if isinstance(v, decimal.Decimal):
        return {"t": "decimal", "v": str(v)}
    if isinstance(v, float):
        return {"t": "float", "v": v.hex()}
    if isinstance(v, bytes | bytearray | memoryview):
        return {"t": "bytes", "v": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, uuid.UUID):
        return {"t": "uuid", "v": str(v)}
    raise InputError(f"page column values of type {type(v).__name__} cannot be saved in a layout")


def decode_value(d: Mapping[str, Any]) -> object:
    """Inverse of :func:`encode_value`."""
    try:
        tag, v = d["t"], d["v"]
        if tag in ("bool", "int", "str"):
            if tag == "int" and (not isinstance(v, int) or isinstance(v, bool)):
                raise TypeError(v)
            return v
        if tag == "datetime":
            return dt.datetime.fromisoformat(v)
        if tag == "date":
            return dt.date.fromisoformat(v)
        if tag == "decimal":
            return decimal.Decimal(v)
        if tag == "float":
            return float.fromhex(v)
        if tag == "bytes":
            return base64.b64decode(v)
        if tag == "uuid":
            return uuid.UUID(v)
    except (KeyError, TypeError, ValueError, decimal.InvalidOperation) as e:
        raise CheckpointError(f"bad boundary value in master layout: {d!r} ({e})") from None
    raise CheckpointError(f"bad boundary value in master layout: unknown type tag in {d!r}")


def python_type(col: sa.Column[Any]) -> type | None:
    """Return the column's Python type, None where SQLAlchemy does not know it."""
    try:
        return col.type.python_type
    except NotImplementedError:
        return None


@dataclass(frozen=True)
class Layout:
    """Partition boundaries (upper bounds of partitions 0 .. K-2) and the rows counted then."""

    bounds: tuple[object, ...]  # K - 1 upper bounds of partitions 0 .. K-2
    num_rows: int

    @property
    def k(self) -> int:
        """Partitions."""
        return len(self.bounds) + 1


def partition_expr(page: sa.Column[Any], bounds: Sequence[object]) -> sa.ColumnElement[Any]:
    """Partition of a row, computed by the database: the first p with page <= bound[p], else K - 1."""
    if not bounds:
        return sa.literal(0, sa.Integer)
    whens = [(page <= sa.bindparam(None, b, type_=page.type), p) for p, b in enumerate(bounds)]
    return sa.case(*whens, else_=len(bounds))
