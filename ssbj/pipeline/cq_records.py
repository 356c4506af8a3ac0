"""Decode one micro-batch of raw change records into change rows per relation, with source positions.

The raw rows (``relation``, ``value``, ``topic``, ``partition``, ``offset``, ``path``) are Kafka
messages holding Debezium JSON envelopes, or whole landed files (Debezium JSON lines, or
Parquet rows with ``_op``).  Every change gets a ``_seq`` from one counter, relation by
relation (the query's order), and within a relation in source order (partition and offset,
or path and line), so a replayed batch gets the same ``_seq`` values.  Across relations the
order does not matter: the answer after a batch depends only on the tuples present, and
whether a change applies (a delete of a missing key, a second insert) only on the changes of
its own relation.  ``_pos`` indexes :attr:`DecodedChanges.where`, which says where each
change came from, for dead letters the engine raises later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ssbj.contracts import DEAD_LETTER_SCHEMA
from ssbj.cq.changes import OP, POS, SEQ, DeadLetter, plain_strings, validate
from ssbj.cq.debezium import decode as decode_debezium
from ssbj.cq.query import QueryPlan
from ssbj.cq.schema import Table

RAW_COLUMNS = ("relation", "value", "topic", "partition", "offset", "path")
_MAX_PAYLOAD = 64 << 10


@dataclass
class Where:
    """The source position of one record."""

    position: str
    payload: bytes | None
    file: str | None = None
    line: int | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None


@dataclass
class DecodedChanges:
    """One batch's change rows per relation, where they came from, and the records that could not be decoded."""

    changes: dict[str, pa.Table] = field(default_factory=dict)
    where: dict[str, list[Where]] = field(default_factory=dict)
    dead: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0  # records read: messages, JSON lines, Parquet rows, snapshot rows
    skipped: int = 0  # tombstones (a Kafka delete marker after a Debezium delete): no change
    next_seq: int = 0

    def add_dead(self, reason: str, w: Where) -> None:
        """Record a dead letter (contracts' schema) with its reason and position."""
        self.dead.append(
            {
                "reason": reason,
                "position": w.position,
                "file": w.file,
                "line": w.line,
                "topic": w.topic,
                "partition": w.partition,
                "offset": w.offset,
                "payload": w.payload[:_MAX_PAYLOAD] if w.payload is not None else None,
            }
        )

    def dead_letter(self, d: DeadLetter) -> None:
        """Record a change the engine refused, at its source position."""
        w = self.where[d.relation][d.position]
        if w.payload is None:
            w = Where(**{**w.__dict__, "payload": d.row.encode()})
        self.add_dead(f"{d.relation}: {d.reason}", w)

    def dead_table(self) -> pa.Table:
        """Return the dead letters as a table of :data:`ssbj.contracts.DEAD_LETTER_SCHEMA`."""
        return pa.Table.from_pylist(self.dead, schema=DEAD_LETTER_SCHEMA)

    def changed_rows(self) -> int:
        """Change rows decoded (an update is two)."""
        return sum(t.num_rows for t in self.changes.values())


def _append(out: DecodedChanges, relation: str, spec: Table, table: pa.Table) -> None:
    # cast to the schema here (bad rows dead-lettered), so pieces of one relation concatenate
    table, dead = validate(table, spec, relation)
    for d in dead:
        out.dead_letter(d)
    if relation in out.changes:
        out.changes[relation] = pa.concat_tables([out.changes[relation], table])
    else:
        out.changes[relation] = table


def _debezium(out: DecodedChanges, relation: str, spec: Table, messages: list[Any], where: list[Where]) -> None:
    base = len(out.where.setdefault(relation, []))
    out.where[relation].extend(where)
    table, dead, out.next_seq = decode_debezium(messages, spec, relation, out.next_seq)
    for d in dead:
        out.add_dead(f"{relation}: {d.reason}", where[d.position])
    if base:
        table = table.set_column(
            table.schema.get_field_index(POS), POS, pa.array(table.column(POS).to_numpy() + base, pa.int64())
        )
    _append(out, relation, spec, table)


def _parquet(out: DecodedChanges, relation: str, spec: Table, path: str, content: bytes) -> None:
    try:
        t = plain_strings(pq.read_table(pa.BufferReader(content)))
    except (OSError, pa.ArrowInvalid) as exc:
        out.records += 1
        out.add_dead(f"{relation}: unreadable Parquet file: {exc}", Where(path, None, file=path))
        return
    missing = [c for c in (*spec.columns, OP) if c not in t.column_names]
    if missing:
        out.records += 1
        out.add_dead(f"{relation}: change file lacks column(s) {missing}", Where(path, None, file=path))
        return
    n = t.num_rows
    out.records += n
    rows = out.where.setdefault(relation, [])
    base = len(rows)
    rows.extend(Where(f"{path}:row {i + 1}", None, file=path, line=i + 1) for i in range(n))
    t = t.select([*spec.columns, OP])
    t = t.append_column(SEQ, pa.array(np.arange(out.next_seq, out.next_seq + n, dtype=np.int64)))
    t = t.append_column(POS, pa.array(np.arange(base, base + n, dtype=np.int64)))
    out.next_seq += n
    _append(out, relation, spec, t)


def decode_batch(raw: pa.Table, plan: QueryPlan, formats: dict[str, str], out: DecodedChanges) -> None:
    """Decode the raw rows of one micro-batch into ``out``; ``formats`` gives each file source's format."""
    if raw.num_rows == 0:
        return
    cols = {c: raw.column(c).to_pylist() for c in RAW_COLUMNS}
    by_rel: dict[str, list[int]] = {}
    for i, r in enumerate(cols["relation"]):
        by_rel.setdefault(r, []).append(i)
    for relation in plan.relations():
        idx = by_rel.get(relation)
        if not idx:
            continue
        spec = plan.tables[relation]
        if cols["path"][idx[0]] is None:  # Kafka messages
            idx.sort(key=lambda i: (cols["topic"][i], cols["partition"][i], cols["offset"][i]))
            messages: list[Any] = []
            where: list[Where] = []
            for i in idx:
                t, p, o, v = cols["topic"][i], cols["partition"][i], cols["offset"][i], cols["value"][i]
                out.records += 1
                if v is None:
                    out.skipped += 1
                    continue
                messages.append(v)
                where.append(Where(f"{t}/{p}/{o}", v, topic=t, partition=p, offset=o))
            _debezium(out, relation, spec, messages, where)
            continue
        idx.sort(key=lambda i: cols["path"][i])
        for i in idx:
            path, content = cols["path"][i], cols["value"][i] or b""
            if formats.get(relation) == "parquet":
                _parquet(out, relation, spec, path, content)
                continue
            messages, where = [], []
            for n, line in enumerate(content.split(b"\n"), start=1):
                if not line.strip():
                    continue
                out.records += 1
                messages.append(line)
                where.append(Where(f"{path}:{n}", line, file=path, line=n))
            _debezium(out, relation, spec, messages, where)


def snapshot_changes(out: DecodedChanges, relation: str, spec: Table, table: str, rows: list[tuple[Any, ...]]) -> None:
    """Add the rows of a snapshot table (in ``spec``'s column order) as inserts."""
    names = list(spec.columns)
    arrays = []
    for j, c in enumerate(names):
        values = [r[j] for r in rows]
        try:
            arrays.append(pa.array(values, spec.columns[c].type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            arrays.append(pa.array(values))  # validated and cast by the engine, bad values dead-lettered
    n = len(rows)
    out.records += n
    where = out.where.setdefault(relation, [])
    base = len(where)
    where.extend(Where(f"snapshot {table} row {i + 1}", None) for i in range(n))
    t = pa.Table.from_arrays(arrays, names=names) if n else spec.arrow_schema().empty_table()
    t = t.append_column(OP, pa.array(["+"] * n, pa.string()))
    t = t.append_column(SEQ, pa.array(np.arange(out.next_seq, out.next_seq + n, dtype=np.int64)))
    t = t.append_column(POS, pa.array(np.arange(base, base + n, dtype=np.int64)))
    out.next_seq += n
    _append(out, relation, spec, t)
