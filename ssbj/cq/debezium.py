"""Debezium change events (the JSON envelope: ``op`` c/u/d/r, ``before``, ``after``) as change rows.

A pure decoder, no Kafka: the caller reads messages (a topic per relation, in offset
order) and gives their values here with the ``_seq`` to start from.  ``c`` (insert) and
``r`` (snapshot read) become ``+ after``; ``d`` becomes ``- before``; ``u`` becomes
``- before`` then ``+ after`` (two consecutive ``_seq``).  A tombstone (``None``) is skipped.
An event that cannot become a change (no ``before`` for u/d: the table needs
``REPLICA IDENTITY FULL`` or an equivalent; an unknown ``op``; not JSON) is dead-lettered.
Values are converted by the schema: ``DATE`` from days since the epoch
(``io.debezium.time.Date``) or ISO text, ``DECIMAL`` from text or numbers
(``decimal.handling.mode=string|double``; the binary mode is not decoded).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import pyarrow as pa

from ssbj.cq.changes import OP, SEQ, DeadLetter
from ssbj.cq.schema import Table

_EPOCH = dt.date(1970, 1, 1)


def _value(v: Any, typ: pa.DataType) -> Any:
    if v is None:
        return None
    if pa.types.is_date32(typ):
        if isinstance(v, int):
            return _EPOCH + dt.timedelta(days=v)
        return dt.date.fromisoformat(str(v))
    if pa.types.is_decimal(typ):
        if isinstance(v, float):
            return decimal.Decimal(repr(v))
        return decimal.Decimal(str(v))
    return v


def decode(messages: list[Any], spec: Table, relation: str, seq_start: int) -> tuple[pa.Table, list[DeadLetter], int]:
    """Decode Debezium message values of ``relation`` into changes; also the dead letters and the next ``_seq``."""
    rows: list[dict[str, Any]] = []
    dead: list[DeadLetter] = []
    seq = seq_start
    for pos, raw in enumerate(messages):
        if raw is None:
            continue  # a tombstone after a delete: compaction's, not a change
        try:
            msg = json.loads(raw) if isinstance(raw, (str, bytes, bytearray)) else raw
            payload = msg.get("payload", msg) if isinstance(msg, dict) else None
            if not isinstance(payload, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            dead.append(DeadLetter(relation, None, pos, f"not a Debezium event: {exc}", str(raw)[:500]))
            continue
        op = payload.get("op")
        before, after = payload.get("before"), payload.get("after")
        images: list[tuple[str, Any]]
        if op in ("c", "r"):
            images = [("+", after)]
        elif op == "d":
            images = [("-", before)]
        elif op == "u":
            images = [("-", before), ("+", after)]
        else:
            dead.append(DeadLetter(relation, None, pos, f"unsupported Debezium op {op!r}", json.dumps(payload)[:500]))
            continue
        if any(not isinstance(img, dict) for _, img in images):
            why = f"op {op!r} without its {'before' if op in ('u', 'd') else 'after'} image"
            dead.append(DeadLetter(relation, None, pos, why, json.dumps(payload)[:500]))
            continue
        try:
            converted = [
                (sign, {c.name: _value(img.get(c.name), c.type) for c in spec.columns.values()}) for sign, img in images
            ]
        except (ValueError, ArithmeticError, TypeError) as exc:
            dead.append(
                DeadLetter(relation, None, pos, f"value does not fit the schema: {exc}", json.dumps(payload)[:500])
            )
            continue
        for sign, row in converted:
            row[OP], row[SEQ], row["_pos"] = sign, seq, pos
            rows.append(row)
            seq += 1
    fields = [pa.field(c.name, c.type) for c in spec.columns.values()]
    fields += [pa.field(OP, pa.string()), pa.field(SEQ, pa.int64()), pa.field("_pos", pa.int64())]
    schema = pa.schema(fields)
    try:
        table = pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        good: list[dict[str, Any]] = []
        for row in rows:  # find the rows Arrow refuses (a text in a number column, ...)
            try:
                pa.Table.from_pylist([row], schema=schema)
                good.append(row)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                dead.append(
                    DeadLetter(relation, row[SEQ], row["_pos"], f"value does not fit the schema: {exc}", str(row)[:500])
                )
        table = pa.Table.from_pylist(good, schema=schema)
    return table, dead, seq
