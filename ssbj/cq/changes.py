"""Change rows: validation against the schema, dead letters, and the landing-directory reader.

A change is one row of a relation with ``_op`` (``+`` insert, ``-`` delete) and ``_seq``
(one global order of all changes across relations); a delete is matched by primary key,
so only its key columns are checked.  A row that does not fit the schema
(a value that does not cast safely to the column's type, a NULL in a ``NOT NULL`` or key
column, a string longer than its ``CHAR(n)``, an ``_op`` other than ``+``/``-``, a NULL or
repeated ``_seq``) is dead-lettered with its reason and position, never applied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ssbj.cq.schema import Table
from ssbj.errors import InputError

OP, SEQ, POS = "_op", "_seq", "_pos"
DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("relation", pa.string()),
        pa.field(SEQ, pa.int64()),
        pa.field("position", pa.int64()),
        pa.field("reason", pa.string()),
        pa.field("row", pa.string()),
    ]
)


@dataclass(frozen=True)
class DeadLetter:
    """A change that was not applied: its relation, ``_seq``, row position in its source, and why."""

    relation: str
    seq: int | None
    position: int
    reason: str
    row: str

    def as_dict(self) -> dict[str, Any]:
        """As a row of :data:`DEAD_LETTER_SCHEMA`."""
        return {
            "relation": self.relation,
            SEQ: self.seq,
            "position": self.position,
            "reason": self.reason,
            "row": self.row,
        }


def plain_strings(table: pa.Table) -> pa.Table:
    """Cast string_view/binary_view columns (as Parquet writers such as tpchgen-cli produce) to plain ones."""
    fields = []
    for f in table.schema:
        if pa.types.is_string_view(f.type):
            f = pa.field(f.name, pa.string(), f.nullable)
        elif pa.types.is_binary_view(f.type):
            f = pa.field(f.name, pa.binary(), f.nullable)
        fields.append(f)
    schema = pa.schema(fields)
    return table if schema == table.schema else table.cast(schema)


def _row_json(table: pa.Table, i: int) -> str:
    row = {k: v[0] for k, v in table.slice(i, 1).to_pydict().items()}
    return json.dumps(row, default=str, sort_keys=True)


def _cast_column(col: pa.ChunkedArray, typ: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    """``col`` cast to ``typ``, with a bad-row mask (values that do not cast safely become NULL; None: no bad row)."""
    arr = col
    if isinstance(col, pa.ChunkedArray):
        arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    if arr.type == typ:
        return arr, None
    try:
        return pc.cast(arr, typ, safe=True), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    bad = np.zeros(len(arr), dtype=bool)
    out: list[Any] = []
    for i in range(len(arr)):  # the slow path, only for a column holding a bad value
        try:
            out.append(pc.cast(arr.slice(i, 1), typ, safe=True)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad[i] = True
            out.append(None)
    return pa.array(out, typ), bad


def _longest_bytes(arr: pa.Array) -> int:
    """Return the longest value's length in bytes (>= its length in characters), from the offsets alone."""
    if not pa.types.is_string(arr.type):
        return int(pc.max(pc.binary_length(arr)).as_py() or 0)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
    return int((offsets[1:] - offsets[:-1]).max())


def validate(table: pa.Table, spec: Table, relation: str) -> tuple[pa.Table, list[DeadLetter]]:
    """Rows of ``table`` cast to the schema of ``spec`` (plus ``_op``/``_seq``/``_pos``), and the dead letters."""
    index = {c: i for i, c in enumerate(table.column_names)}  # columns by position: a lookup by name scans
    missing = [c for c in (*spec.columns, OP, SEQ) if c not in index]
    if missing:
        raise InputError(f"changes of {relation} lack column(s) {missing}")
    n = table.num_rows
    reasons: dict[int, str] = {}  # row -> the first reason found
    pos = table.column(index[POS]) if POS in index else pa.array(np.arange(n, dtype=np.int64))

    def mark(mask: np.ndarray, why: str) -> None:
        if not mask.any():
            return
        for i in np.flatnonzero(mask).tolist():
            reasons.setdefault(i, why)

    ops, _ = _cast_column(table.column(index[OP]), pa.string())
    plus = pc.equal(ops, "+")
    valid_op = pc.or_(plus, pc.equal(ops, "-"))
    if valid_op.null_count or not pc.all(valid_op).as_py():
        mark(~np.asarray(pc.fill_null(valid_op, False)), "_op is not '+' or '-'")
    seq, bad_seq = _cast_column(table.column(index[SEQ]), pa.int64())
    if bad_seq is not None or seq.null_count:
        null_seq = np.asarray(pc.is_null(seq))
        mark(null_seq if bad_seq is None else bad_seq | null_seq, "_seq is NULL or not an integer")
    # a delete names its tuple by primary key: its other columns are not read, not checked
    # (a Debezium delete may carry the key alone)
    inserts = np.asarray(pc.fill_null(plus, True) if plus.null_count else plus)
    every = np.ones(n, dtype=bool)
    cols: dict[str, pa.Array] = {}
    for name, c in spec.columns.items():
        checked = every if name in spec.primary_key else inserts
        arr, bad = _cast_column(table.column(index[name]), c.type)
        if bad is not None:
            mark(bad & checked, f"{name}: value does not fit {c.type}")
        if c.not_null and arr.null_count:
            mark(np.asarray(pc.is_null(arr)) & checked, f"{name}: NULL in a NOT NULL column")
        if c.max_length is not None and len(arr) and _longest_bytes(arr) > c.max_length:  # else no row is too long
            too_long = np.asarray(pc.fill_null(pc.greater(pc.utf8_length(arr), c.max_length), False))
            mark(too_long & checked, f"{name}: longer than {c.max_length}")
        cols[name] = arr
    cols[OP] = ops
    cols[SEQ] = seq
    cols[POS] = pos.combine_chunks() if isinstance(pos, pa.ChunkedArray) else pos
    out = pa.table(cols)
    bad_rows = sorted(reasons)
    if not bad_rows:
        return out, []
    seqs = seq.to_pylist()
    posl = cols[POS].to_pylist()
    letters = [DeadLetter(relation, seqs[i], int(posl[i]), reasons[i], _row_json(table, i)) for i in bad_rows]
    keep = np.ones(n, dtype=bool)
    keep[bad_rows] = False
    return out.filter(pa.array(keep)), letters


class ChangeDirectory:
    """``DIR/<relation>.parquet`` files merged into one sequence by ``_seq``, served in micro-batches."""

    def __init__(self, path: str | Path, relations: list[str]) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise InputError(f"changes directory {self.path} does not exist")
        self.tables: dict[str, pa.Table] = {}
        for rel in relations:
            f = self.path / f"{rel}.parquet"
            if not f.exists():
                continue  # no changes of this relation
            try:
                t = plain_strings(pq.read_table(f))
            except (OSError, pa.ArrowInvalid) as exc:
                raise InputError(f"changes file {f} is not readable Parquet: {exc}") from exc
            if OP not in t.column_names or SEQ not in t.column_names:
                raise InputError(f"changes file {f} lacks the _op/_seq columns")
            self.tables[rel] = t.append_column(POS, pa.array(np.arange(t.num_rows, dtype=np.int64)))
        if not self.tables:
            raise InputError(f"changes directory {self.path} holds no file of the query's relations {relations}")
        names = list(self.tables)
        seqs, rel_idx, row_idx = [], [], []
        for r, name in enumerate(names):
            s = pc.cast(self.tables[name].column(SEQ), pa.float64(), safe=False).to_numpy(zero_copy_only=False)
            s = np.where(np.isnan(s), np.inf, s)  # NULL _seq: last, then dead-lettered
            seqs.append(s)
            rel_idx.append(np.full(len(s), r, dtype=np.int32))
            row_idx.append(np.arange(len(s), dtype=np.int64))
        all_seq = np.concatenate(seqs)
        self.order = np.argsort(all_seq, kind="stable")
        self.rel_idx = np.concatenate(rel_idx)[self.order]
        self.row_idx = np.concatenate(row_idx)[self.order]
        self.names = names

    def __len__(self) -> int:
        return len(self.order)

    def batches(self, batch_rows: int, start: int = 0) -> Any:
        """Yield ``{relation: rows}`` for consecutive slices of ``batch_rows`` changes from ``start``."""
        for lo in range(start, len(self.order), batch_rows):
            hi = min(lo + batch_rows, len(self.order))
            rel, rows = self.rel_idx[lo:hi], self.row_idx[lo:hi]
            out = {}
            for r, name in enumerate(self.names):
                sel = rows[rel == r]
                if len(sel):
                    out[name] = self.tables[name].take(pa.array(sel))
            yield hi, out
