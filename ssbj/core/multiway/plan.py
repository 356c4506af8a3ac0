"""How a :class:`MultiWaySpec` is laid out for the operator: columns, edges, held or scanned.

Every intermediate row carries the columns it needs later, named ``<alias>.<column>``.
A master is held whole (an ordered key index over the filtered, projected table) when it
fits its share of the budget, smallest first; any other master is scanned cyclically in
partitions of ``b`` rows, each with its own cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ssbj.contracts import MasterScan
from ssbj.core.arrowtypes import plain_table
from ssbj.core.multiway.keyindex import KeyIndex
from ssbj.core.multiway.spec import JoinEdge, MultiWaySpec
from ssbj.errors import ConfigError, InputError, StateError

INDEX_BYTES_PER_ROW = 16  # row number and code of the ordered index, int64 each


def qual(alias: str, column: str) -> str:
    """Column name inside the operator."""
    return f"{alias}.{column}"


def needed_columns(spec: MultiWaySpec) -> dict[str, list[str]]:
    """Columns of each input that the joins or the output use, in a stable order."""
    need: dict[str, list[str]] = {spec.stream: list(spec.stream_columns)}
    for m in spec.masters:
        need[m.alias] = list(m.columns)

    def add(alias: str, col: str) -> None:
        if col not in need[alias]:
            need[alias].append(col)

    w = spec.window
    if w is not None:
        need[w.stream] = list(w.columns)
        for c in (*w.keys, w.time):
            add(w.stream, c)
        for c in (*w.probe_keys, w.probe_time):
            add(spec.stream, c)

    for e in spec.edges:
        for c in e.master_columns:
            add(e.master, c)
        for c in e.probe_columns:
            add(e.probe, c)
    for o in spec.output:
        if o.alias not in need:
            raise ConfigError(f"multi-way join: output column {o.name!r} names unknown input {o.alias!r}")
        add(o.alias, o.column)
    return need


def apply_filter(table: pa.Table, alias: str, spec: MultiWaySpec) -> pa.Table:
    """Rows of one input that pass its own predicate (NULL is false, as in SQL)."""
    flt = spec.filters.get(alias)
    if flt is None:
        return table
    try:
        return table.filter(flt)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, KeyError) as exc:
        raise InputError(f"multi-way join: the filter on {alias!r} cannot be applied to its columns: {exc}") from exc


def prepare_input(table: pa.Table, alias: str, cols: list[str], spec: MultiWaySpec) -> pa.Table:
    """Filter (the input's own predicate), project and qualify one input's columns."""
    table = plain_table(table)
    missing = [c for c in cols if c not in table.column_names]
    if missing:
        raise InputError(f"multi-way join: input {alias!r} lacks columns {missing} (has {table.column_names})")
    table = apply_filter(table, alias, spec)
    table = table.select(cols)
    return table.rename_columns([qual(alias, c) for c in cols])


@dataclass
class EdgePlan:
    """One join edge as the operator runs it."""

    index: int
    edge: JoinEdge
    needs: int | None  # the edge that joins the input this one probes (None: a stream)
    probe_cols: list[str]
    key_cols: list[str]
    master_cols: list[str]  # qualified columns of the master the output rows carry
    master_types: list[pa.DataType]
    held: bool
    table: pa.Table  # held: filtered and projected; scanned: the source as given (read by slices)
    index_: KeyIndex | None = None
    scan: MasterScan | None = None  # a scanned master read partition by partition (e.g. from a database)
    b: int = 0
    k: int = 1
    row_bytes: float = 0.0
    proj_bytes: int = 0

    @property
    def left(self) -> bool:
        """A left edge NULL-extends rows without a match."""
        return self.edge.kind == "left"

    def held_index(self) -> KeyIndex:
        """Return the index of a master held whole."""
        if self.index_ is None:
            raise StateError(f"master {self.edge.master!r} is scanned, not held whole")
        return self.index_

    def held_bytes(self) -> int:
        """Bytes of a master held whole: the table and its index."""
        return int(self.table.nbytes) + (self.index_.nbytes if self.index_ is not None else 0)

    @property
    def num_rows(self) -> int:
        """Rows of the master (of the scan's layout for a master read by a scan)."""
        return int(self.scan.num_rows) if self.scan is not None else int(self.table.num_rows)

    def read_partition(self, p: int, spec: MultiWaySpec) -> pa.Table:
        """Partition ``p`` of a scanned master, as a database scan returns it: filtered, projected."""
        if self.scan is not None:
            return _filter_project(plain_table(self.scan.read_partition(p)), self, spec)
        return _filter_project(self.table.slice(p * self.b, self.b), self, spec)


def _filter_project(src: pa.Table, p: EdgePlan, spec: MultiWaySpec) -> pa.Table:
    src = apply_filter(src, p.edge.master, spec)
    raw = [c.split(".", 1)[1] for c in p.master_cols]
    return src.select(raw).rename_columns(p.master_cols)


def _schema_row_bytes(schema: pa.Schema) -> float:
    """Bytes per row of ``schema`` before any row is read: fixed widths, 32 for a variable-width value."""
    total = 0.0
    for f in schema:
        try:
            total += max(1, f.type.bit_width // 8)
        except ValueError:
            total += 32.0
    return max(total, 1.0)


def build_edges(
    spec: MultiWaySpec,
    masters: Mapping[str, pa.Table | MasterScan],
    memory_budget: int,
    hold: Mapping[str, bool] | None,
    hold_share: float,
    partition_rows: Mapping[str, int] | int | None,
    partition_share: float,
) -> list[EdgePlan]:
    """Lay out every edge; decide which masters are held whole.

    A master given as a :class:`MasterScan` (``schema`` included) is always scanned, in the
    scan's own partitions (its ``partition_rows`` and ``num_partitions()``, fixed by its layout).
    """
    need = needed_columns(spec)
    by_master = {e.master: i for i, e in enumerate(spec.edges)}
    plans: list[EdgePlan] = []
    for i, e in enumerate(spec.edges):
        m = spec.master(e.master)
        src = masters.get(m.table, masters.get(m.alias))
        if src is None:
            raise InputError(f"multi-way join: no table given for master {m.alias!r} (table {m.table!r})")
        cols = need[e.master]
        scan: MasterScan | None = None
        if isinstance(src, pa.Table):
            src = plain_table(src)
            schema = src.schema
        else:
            scan = src
            schema = getattr(src, "schema", None)
            if not isinstance(schema, pa.Schema):
                raise ConfigError(f"multi-way join: the scan of master {m.alias!r} has no Arrow schema")
            if hold is not None and hold.get(e.master):
                raise ConfigError(f"multi-way join: master {m.alias!r} is given as a scan and cannot be held whole")
            src = schema.empty_table()
        missing = [c for c in cols if c not in schema.names]
        if missing:
            raise InputError(f"multi-way join: master {m.alias!r} lacks columns {missing}")
        if scan is None:
            proj = src.select(cols)
            row_bytes = proj.nbytes / max(proj.num_rows, 1)
            proj_bytes = int(proj.nbytes)
        else:
            row_bytes = _schema_row_bytes(pa.schema([schema.field(c) for c in cols]))
            proj_bytes = int(row_bytes * scan.num_rows)
        plans.append(
            EdgePlan(
                index=i,
                edge=e,
                needs=None if e.probe in spec.streams else by_master[e.probe],
                probe_cols=[qual(e.probe, c) for c in e.probe_columns],
                key_cols=[qual(e.master, c) for c in e.master_columns],
                master_cols=[qual(e.master, c) for c in cols],
                master_types=[schema.field(c).type for c in cols],
                held=False,
                table=src,
                scan=scan,
                row_bytes=row_bytes,
                proj_bytes=proj_bytes,
            )
        )
    # hold the smallest masters whole while they fit their share of the budget
    room = hold_share * memory_budget
    for p in sorted(plans, key=lambda p: p.proj_bytes):
        if p.scan is not None:
            continue
        want = hold.get(p.edge.master) if hold is not None else None
        size = p.proj_bytes + INDEX_BYTES_PER_ROW * p.table.num_rows
        if want is True or (want is None and size <= room):
            p.held = True
            room -= size
    scanned = [p for p in plans if not p.held]
    for p in plans:
        if p.held:
            p.table = _filter_project(p.table, p, spec)
            p.index_ = KeyIndex([p.table.column(c) for c in p.key_cols])
            continue
        if p.scan is not None:
            p.b = max(1, int(p.scan.partition_rows))
            p.k = max(1, int(p.scan.num_partitions()))
            continue
        if isinstance(partition_rows, int):
            b = partition_rows
        elif partition_rows is not None and p.edge.master in partition_rows:
            b = partition_rows[p.edge.master]
        else:
            b = int(partition_share * memory_budget / max(len(scanned), 1) / max(p.row_bytes, 1.0))
        p.b = max(1, b)
        p.k = max(1, -(-p.table.num_rows // p.b))
    return plans


def null_columns(p: EdgePlan, n: int) -> list[pa.Array]:
    """Return the master's columns of ``n`` NULL-extended rows."""
    return [pa.nulls(n, t) for t in p.master_types]


def joined(table: pa.Table, left: np.ndarray, master: pa.Table, right: np.ndarray, p: EdgePlan) -> pa.Table:
    """Rows of ``table`` extended with their matching master rows."""
    out = table.take(left)
    mt = master.take(right)
    for c in p.master_cols:
        out = out.append_column(c, mt.column(c))
    return out


def null_extended(table: pa.Table, rows: np.ndarray, p: EdgePlan) -> pa.Table:
    """Rows of ``table`` without a match, the master's columns NULL."""
    out = table.take(rows)
    for c, a in zip(p.master_cols, null_columns(p, len(rows)), strict=True):
        out = out.append_column(c, a)
    return out
