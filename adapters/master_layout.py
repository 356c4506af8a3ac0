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
from sqlalchemy.engine import Connection

from ssbj.errors import CheckpointError, InputError

LAYOUT_VERSION = 1
# the type tag a page column's boundaries must carry, by its Python type (others: any tag)
_TAGS: dict[type | None, str] = {
    int: "int",
    str: "str",
    dt.date: "date",
    dt.datetime: "datetime",
    uuid.UUID: "uuid",
    bytes: "bytes",
}


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


def compute_layout(
    conn: Connection, table: sa.Table, page: sa.Column[Any], where: sa.ColumnElement[bool] | None, b: int
) -> Layout:
    """Boundaries every ``b`` rows of ``page`` (a query per partition: the b-th value past the last) and the rows."""
    count_all = sa.select(sa.func.count()).select_from(table)
    if where is not None:
        count_all = count_all.where(where)
    bounds: list[object] = []
    last: object = None
    while True:
        q = sa.select(page).order_by(page).limit(1).offset(b - 1)
        if where is not None:
            q = q.where(where)
        if bounds:
            q = q.where(page > last)
        v = conn.execute(q).scalar_one_or_none()
        if v is None:
            break
        bounds.append(v)
        last = v
    rest_q = count_all.where(page > last) if bounds else count_all
    rest = int(conn.execute(rest_q).scalar_one())
    if bounds and rest == 0:
        bounds.pop()  # the last boundary is the maximum: no empty last partition
        rest = b
    return Layout(tuple(bounds), len(bounds) * b + rest)


def restore_layout(
    layout: Mapping[str, Any], want: Mapping[str, object], shard: str | None, page: sa.Column[Any]
) -> Layout:
    """Return the :class:`Layout` a checkpoint saved, checked against ``want`` (table, page column, b) and the shard."""
    if not isinstance(layout, Mapping) or layout.get("version") != LAYOUT_VERSION:
        raise CheckpointError(f"master layout must be a dict with version {LAYOUT_VERSION}, got {layout!r:.200}")
    for field, value in want.items():
        if layout.get(field) != value:
            raise CheckpointError(
                f"master layout was made for {field} {layout.get(field)!r}, this scan has {value!r} "
                "(a different b needs repartition())"
            )
    if layout.get("shard") != shard:
        raise CheckpointError(f"master layout was made for shard {layout.get('shard')!r}, this scan reads {shard!r}")
    bounds = layout.get("bounds")
    num_rows = layout.get("num_rows")
    if not isinstance(bounds, list) or not isinstance(num_rows, int) or num_rows < 0:
        raise CheckpointError("master layout needs a list 'bounds' and an integer 'num_rows' >= 0")
    values = tuple(decode_value(v) for v in bounds)
    tag = _TAGS.get(python_type(page))
    if tag is not None and any(v["t"] != tag for v in bounds):
        raise CheckpointError(
            f"master layout boundaries are not all of type {tag!r}, the type of page column {page.name!r}"
        )
    return Layout(values, num_rows)
