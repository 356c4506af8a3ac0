"""Decode one source's raw records once for several jobs that join on different stream keys.

Jobs that read the same source declare the same schema, so a record decodes (or fails
to) the same way for all of them, except for one rule that depends on the job: a record
whose *key field is missing* is a dead letter of that job (a JSON ``null`` key is a NULL
key, which never matches). So the records are decoded once, and each key gets the rows
that miss it, with their dead letters; :meth:`SharedDecoded.for_key` gives a job exactly
what :func:`ssbj.pipeline.records.decoder` gives it alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ssbj.config import JobConfig
from ssbj.pipeline.records import (
    Decoded,
    _Bad,
    _DeadLetters,
    _good_indexes,
    _one_line,
    decode_csv_lines,
    decode_parquet,
    file_lines,
    json_keys,
    landed_files,
)


@dataclass
class SharedDecoded:
    """Rows of one batch decoded once; per key, the rows that miss it and their dead letters."""

    rows: pa.Table
    dead: pa.Table  # dead letters of every job on the source
    missing: dict[str, np.ndarray] = field(default_factory=dict)  # key -> mask over rows: key field missing
    missing_dead: dict[str, pa.Table] = field(default_factory=dict)  # key -> its own dead letters

    def for_key(self, key: str) -> Decoded:
        """Return what a job joining on ``key`` decodes from the batch (as the single-job decoder would)."""
        mask = self.missing.get(key)
        rows = self.rows if mask is None or not mask.any() else self.rows.filter(pa.array(~mask))
        extra = self.missing_dead.get(key)
        dead = self.dead if extra is None or not extra.num_rows else pa.concat_tables([self.dead, extra])
        return Decoded(rows, dead)


class _Collect:
    """Rows of several parts, the common dead letters, and per key the missing rows and their dead letters."""

    def __init__(self, keys: Sequence[str], schema: pa.Schema) -> None:
        self.keys = list(keys)
        self.schema = schema
        self.parts: list[pa.Table] = []
        self.masks: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        self.dead = _DeadLetters()
        self.key_dead = {k: _DeadLetters() for k in keys}

    def add(self, rows: pa.Table, missing: dict[str, list[int]]) -> None:
        self.parts.append(rows)
        for k in self.keys:
            m = np.zeros(rows.num_rows, dtype=bool)
            m[missing.get(k, [])] = True
            self.masks[k].append(m)

    def result(self) -> SharedDecoded:
        rows = pa.concat_tables(self.parts) if self.parts else self.schema.empty_table()
        out = SharedDecoded(rows, self.dead.table())
        for k in self.keys:
            out.missing[k] = np.concatenate(self.masks[k]) if self.masks[k] else np.zeros(0, dtype=bool)
            out.missing_dead[k] = self.key_dead[k].table()
        return out


def decode_kafka_keys(raw: pa.Table, schema: pa.Schema, keys: Sequence[str]) -> SharedDecoded:
    """Decode Kafka messages (value, topic, partition, offset) once for jobs on ``keys``."""
    values = raw.column("value").to_pylist()
    rows, bad, index, missing = json_keys(values, schema, keys)
    c = _Collect(keys, schema)
    c.add(rows, missing)
    topics = raw.column("topic").to_pylist()
    parts = raw.column("partition").to_pylist()
    offsets = raw.column("offset").to_pylist()

    def where(i: int) -> tuple[str, dict[str, object]]:
        t, p, o = topics[i], parts[i], offsets[i]
        return f"{t}/{p}/{o}", {"topic": t, "partition": p, "offset": o}

    for b in bad:
        pos, at = where(b.index)
        c.dead.add(b.reason, pos, values[b.index], **at)
    for k, positions in missing.items():
        for p in positions:
            pos, at = where(index[p])
            c.key_dead[k].add(f"missing key field {k!r}", pos, values[index[p]], **at)
    return c.result()


def decode_files_keys(
    raw: pa.Table, fmt: str, schema: pa.Schema, keys: Sequence[str], delimiter: str = ",", header: bool = True
) -> SharedDecoded:
    """Decode landed files (path, content) in path order once for jobs on ``keys``."""
    c = _Collect(keys, schema)
    for path, content in landed_files(raw):
        if fmt == "parquet":
            _parquet_file(c, path, content, schema)
            continue
        lines, numbers, hdr = file_lines(content, fmt == "csv" and header)
        if fmt == "jsonl":
            rows, bad, index, missing = json_keys(lines, schema, keys)
            for k, positions in missing.items():
                for p in positions:
                    n = numbers[index[p]]
                    c.key_dead[k].add(f"missing key field {k!r}", f"{path}:{n}", lines[index[p]], file=path, line=n)
        else:
            rows, bad, missing = _csv_file(c, path, lines, numbers, hdr, schema, delimiter)
        for b in bad:
            n = numbers[b.index]
            c.dead.add(b.reason, f"{path}:{n}", lines[b.index], file=path, line=n)
        c.add(rows, missing)
    return c.result()


def _csv_file(
    c: _Collect,
    path: str,
    lines: list[bytes],
    numbers: list[int],
    hdr: bytes | None,
    schema: pa.Schema,
    delimiter: str,
) -> tuple[pa.Table, list[_Bad], dict[str, list[int]]]:
    cols = None if hdr is None else [x.strip() for x in hdr.decode("utf-8", "replace").split(delimiter)]
    present = [k for k in c.keys if cols is None or k in cols]
    absent = [k for k in c.keys if k not in present]
    if not present:  # no job's key is in the header: every line is a dead letter of every job
        for k in absent:
            for ln, n in zip(lines, numbers, strict=True):
                c.key_dead[k].add(f"missing key column {k!r} in the CSV header", f"{path}:{n}", ln, file=path, line=n)
        return schema.empty_table(), [], {}
    rows, bad = decode_csv_lines(lines, hdr, schema, present[0], delimiter)
    good = _good_indexes(len(lines), bad)
    for k in absent:
        for i in good:
            n = numbers[i]
            c.key_dead[k].add(f"missing key column {k!r} in the CSV header", f"{path}:{n}", lines[i], file=path, line=n)
    return rows, bad, {k: list(range(rows.num_rows)) for k in absent}


def _parquet_file(c: _Collect, path: str, content: bytes, schema: pa.Schema) -> None:
    try:
        names = pq.read_schema(pa.BufferReader(content)).names
        present = [k for k in c.keys if k in names]
        rows: pa.Table | None = None
        bad: list[_Bad] = []
        if present:
            rows, bad, _ = decode_parquet(content, schema, present[0])
    except (pa.ArrowInvalid, ValueError, OSError) as exc:
        c.dead.add(f"unreadable Parquet file: {_one_line(exc)}", path, None, file=path)
        return
    for k in c.keys:
        if k not in names:
            why = f"missing key column {k!r} in the Parquet file (columns: {', '.join(names)})"
            c.key_dead[k].add(f"unreadable Parquet file: {why}", path, None, file=path)
    for b in bad:
        c.dead.add(b.reason, f"{path}:row {b.index + 1}", None, file=path, line=b.index + 1)
    if rows is not None:
        absent = [k for k in c.keys if k not in names]
        c.add(rows, {k: list(range(rows.num_rows)) for k in absent})


def shared_decoder(cfg: JobConfig, keys: Sequence[str]) -> Callable[[pa.Table], SharedDecoded]:
    """Return the decoder of the source of ``cfg`` for jobs joining on ``keys`` (all declaring its schema)."""
    schema, src = cfg.stream_schema, cfg.source
    ks = list(dict.fromkeys(keys))
    if src.kind == "files":
        fmt, delim, header = src.format, src.csv_delimiter, src.csv_header
        return lambda raw: decode_files_keys(raw, fmt, schema, ks, delim, header)
    return lambda raw: decode_kafka_keys(raw, schema, ks)


HAS = "__ssbj_has_"  # + key: the record has that key field (jobs on other keys of the source may still take it)


def flag_keys(schema: pa.Schema | None) -> list[str]:
    """Return the keys a stream schema carries a 'has key' flag for."""
    return [] if schema is None else [f.name.removeprefix(HAS) for f in schema if f.name.startswith(HAS)]


def with_flags(schema: pa.Schema, decoded: SharedDecoded, keys: list[str]) -> pa.Table:
    """Return the batch's rows some job of the source takes, with the stream's 'has key' flags (``schema``)."""
    n = decoded.rows.num_rows
    has = {k: ~decoded.missing[k] if k in decoded.missing else np.ones(n, dtype=bool) for k in keys}
    anyone = np.zeros(n, dtype=bool)
    for k in keys:
        anyone |= has[k]
    cols: dict[str, Any] = {c: decoded.rows.column(c) for c in decoded.rows.column_names}
    for f in schema:
        if f.name.startswith(HAS):
            cols[f.name] = pa.array(has.get(f.name.removeprefix(HAS), np.zeros(n, dtype=bool)))
    table = pa.table(cols, schema=schema)
    return table if anyone.all() else table.filter(pa.array(anyone))
